/**
 * The fixture tools the official conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12) calls by name
 * in its tasks-* scenarios (see ../shared/notes/conformance.md). `closeout serve --tools conformance` exposes them.
 */
import { acceptedContent, inputRequired, ProtocolError } from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

import type { TaskServer } from '../server/taskServer.js';
import { abortableSleep } from './abortableSleep.js';

const NameSchema = z.object({ name: z.string() });

export function registerConformanceTools(tasks: TaskServer): TaskServer {
  tasks.registerTool(
    'greet',
    {
      description: 'Greets by name; never a task',
      inputSchema: z.object({ name: z.string() }),
      task: { support: 'never' },
    },
    ({ name }) => ({ content: [{ type: 'text', text: `Hello, ${name}!` }] }),
  );

  tasks.registerTool(
    'slow_compute',
    {
      description: 'Sleeps for `seconds`, then returns; cancellable',
      inputSchema: z.object({ seconds: z.number().min(0).max(3600).default(1), label: z.string().default('job') }),
      task: { support: 'optional', pollIntervalMs: 200 },
    },
    async ({ seconds, label }, ctx) => {
      await ctx.status(`Computing ${label}`);
      await abortableSleep(seconds * 1000, ctx.signal);
      return { content: [{ type: 'text', text: `Computed ${label} in ${seconds}s` }] };
    },
  );

  tasks.registerTool(
    'failing_job',
    {
      description: 'Completes after about a second with a tool error (isError: true)',
      task: { support: 'required', pollIntervalMs: 200 },
    },
    async (_args, ctx) => {
      await abortableSleep(1000, ctx.signal);
      return { content: [{ type: 'text', text: 'The job failed: the input was invalid' }], isError: true };
    },
  );

  tasks.registerTool(
    'protocol_error_job',
    { description: 'Ends failed with a JSON-RPC error', task: { support: 'optional', pollIntervalMs: 200 } },
    async (_args, ctx) => {
      await abortableSleep(200, ctx.signal);
      throw new ProtocolError(-32603, 'The job hit an internal error');
    },
  );

  tasks.registerTool(
    'confirm_delete',
    {
      description: 'Asks for confirmation through elicitation, then deletes',
      inputSchema: z.object({ filename: z.string().default('file.txt') }),
      task: { support: 'optional', pollIntervalMs: 200 },
    },
    async ({ filename }, ctx) => {
      const answer = await ctx.input('confirm', {
        method: 'elicitation/create',
        params: {
          mode: 'form',
          message: `Delete ${filename}?`,
          requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
        },
      });
      const confirmed =
        answer['action'] === 'accept' && (answer['content'] as { confirm?: unknown })?.confirm !== false;
      return { content: [{ type: 'text', text: confirmed ? `Deleted ${filename}` : `Kept ${filename}` }] };
    },
  );

  tasks.registerTool(
    'multi_input',
    { description: 'Needs two answers outstanding at once', task: { support: 'optional', pollIntervalMs: 200 } },
    async (_args, ctx) => {
      const ask = (key: string, message: string) =>
        ctx.input(key, {
          method: 'elicitation/create',
          params: {
            mode: 'form',
            message,
            requestedSchema: { type: 'object', properties: { value: { type: 'string' } }, required: ['value'] },
          },
        });
      const [first, second] = await Promise.all([ask('first', 'First value?'), ask('second', 'Second value?')]);
      const text = [first, second].map((a) => JSON.stringify(a['content'] ?? null)).join(', ');
      return { content: [{ type: 'text', text: `Received ${text}` }] };
    },
  );

  tasks.registerTool(
    'test_tool_with_task',
    {
      description: 'Asks for a name through MRTR first, then runs as a task that uses it',
      task: { support: 'optional', pollIntervalMs: 200 },
      prepare: async (args, request) => {
        const answered = acceptedContent(request.mcpReq.inputResponses, 'name', NameSchema);
        if (!answered) {
          return inputRequired({
            inputRequests: {
              name: inputRequired.elicit({ message: 'What is your name?', requestedSchema: NameSchema }),
            },
          });
        }
        return { ...args, name: answered.name };
      },
    },
    async (args, ctx) => {
      await abortableSleep(200, ctx.signal);
      return { content: [{ type: 'text', text: `Hello, ${String(args['name'])}! The task finished.` }] };
    },
  );

  return tasks;
}
