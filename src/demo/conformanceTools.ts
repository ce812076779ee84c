/**
 * The fixture tools the official conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12) calls by name
 * in its tasks-* scenarios (see ../shared/notes/conformance.md), and the diagnostic tools of its `server-stateless`
 * scenario. `closeout serve --tools conformance` exposes them; scripts/conformance.sh runs the suite against it.
 */
import type { CallToolResult, InputRequiredResult, McpServer, ServerEventBus } from '@modelcontextprotocol/server';
import { acceptedContent, inputRequired, ProtocolError } from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

import type { TaskServer } from '../server/index.js';
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

const NoArgs = z.object({});
const ConfirmSchema = z.object({ confirm: z.boolean() });
const text = (value: string): CallToolResult => ({ content: [{ type: 'text', text: value }] });

/**
 * The diagnostic tools `server-stateless` (SEP-2575, the 2026-07-28 stateless core) calls by name. They are ordinary
 * tools that need the SDK's request context (MRTR input requests, request-scoped logging), so they are registered on
 * each per-request McpServer through the `setup` hook. `bus` is the handler's `subscriptions/listen` event bus.
 */
export function conformanceDiagnostics(bus: ServerEventBus): (mcp: McpServer) => void {
  // the tool list is the same for every per-request server: this process-wide switch is what test_trigger_tool_change
  // flips, and the factory reads it on the next request
  let dynamicToolListed = false;

  return (mcp) => {
    // without the logging capability the SDK drops every request-scoped log, and test_logging_tool would prove nothing
    mcp.server.registerCapabilities({ logging: {} });

    mcp.registerTool(
      'test_missing_capability',
      {
        description: 'Needs one sampling round trip (MRTR) from the client, so it needs the sampling capability',
        inputSchema: NoArgs,
      },
      async (_args, ctx): Promise<CallToolResult | InputRequiredResult> => {
        // the SDK refuses an input request of a kind the request's client capabilities do not declare: -32021 naming
        // `sampling`, before any result goes out
        const sampled = ctx.mcpReq.inputResponses?.['pong'];
        if (sampled === undefined) {
          return inputRequired({
            inputRequests: {
              pong: inputRequired.createMessage({
                messages: [{ role: 'user', content: { type: 'text', text: 'Reply with one word: pong' } }],
                maxTokens: 8,
              }),
            },
          });
        }
        return text('Sampled through the client');
      },
    );

    mcp.registerTool(
      'test_streaming_elicitation',
      {
        description:
          'Asks for a confirmation through MRTR: the ask travels inside the result, never as its own request',
        inputSchema: NoArgs,
      },
      async (_args, ctx): Promise<CallToolResult | InputRequiredResult> => {
        const answer = acceptedContent(ctx.mcpReq.inputResponses, 'confirm', ConfirmSchema);
        if (!answer) {
          return inputRequired({
            inputRequests: {
              confirm: inputRequired.elicit({
                message: 'Go ahead?',
                requestedSchema: ConfirmSchema,
              }),
            },
          });
        }
        return text(answer.confirm ? 'Confirmed' : 'Declined');
      },
    );

    mcp.registerTool(
      'test_logging_tool',
      {
        description: 'Logs through the request-scoped channel, which delivers only at the level the request set',
        inputSchema: NoArgs,
      },
      async (_args, ctx) => {
        await ctx.mcpReq.log('info', 'test_logging_tool ran');
        return text('Logged (delivered only when the request set _meta logLevel)');
      },
    );

    mcp.registerTool(
      'test_trigger_tool_change',
      {
        description: 'Adds or removes test_dynamic_tool and announces the changed tool list to subscribers',
        inputSchema: NoArgs,
      },
      () => {
        dynamicToolListed = !dynamicToolListed;
        bus.publish({ kind: 'tools_list_changed' });
        return text(dynamicToolListed ? 'Added test_dynamic_tool' : 'Removed test_dynamic_tool');
      },
    );

    if (dynamicToolListed) {
      mcp.registerTool(
        'test_dynamic_tool',
        { description: 'Listed only while test_trigger_tool_change has added it', inputSchema: NoArgs },
        () => text('I come and go'),
      );
    }
  };
}
