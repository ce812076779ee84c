// Typed input (docs/server.md, "What the runtime guarantees"): ctx.elicit asks with a form made from a zod object, its accepted content
// parsed and typed, decline and cancel apart; ctx.confirm is a yes/no question. Over real HTTP with the client half.
import { join } from 'node:path';

import type { ElicitResult } from '@modelcontextprotocol/client';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import type { TaskInputHandlers } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle } from '../../src/client/index.js';
import { startTestServer, type TestServer } from '../support/testServer.js';

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

const DETAILS = z.object({
  env: z.enum(['staging', 'prod']).describe('Where to deploy'),
  replicas: z.number().int().min(1).default(2),
  note: z.string().optional(),
});

async function server(): Promise<TestServer> {
  const made = await startTestServer((tasks) => {
    tasks.registerTool('deploy', { task: { support: 'required', pollIntervalMs: 20 } }, async (_args, ctx) => {
      const details = await ctx.elicit('details', { message: 'Deploy where?', schema: DETAILS });
      if (details.action !== 'accept') return { content: [{ type: 'text', text: details.action }] };
      // typed: env is 'staging' | 'prod', replicas a number
      const { env, replicas } = details.content;
      const sure = await ctx.confirm('sure', `Deploy ${replicas} to ${env}?`);
      return {
        content: [{ type: 'text', text: `${env} x${replicas.toFixed(0)} ${sure ? 'confirmed' : 'not confirmed'}` }],
      };
    });
    tasks.registerTool('nested', { task: { support: 'required', pollIntervalMs: 20 } }, async (_args, ctx) => {
      await ctx.elicit('bad', { message: 'x', schema: z.object({ inner: z.object({ a: z.string() }) }) });
      return { content: [] };
    });
  });
  cleanup.push(() => made.close());
  return made;
}

async function run(made: TestServer, tool: string, elicitation: TaskInputHandlers['elicitation']) {
  const client = await connectHttpTaskClient(made.url, {
    ledger: join(made.dir, `ledger-${Math.random()}.db`),
    pollPolicy: { floorMs: 10, defaultIntervalMs: 20, capMs: 100 },
    inputHandlers: { elicitation },
  });
  cleanup.push(() => client.close());
  const handle = await client.callTool(tool, {});
  if (!isTaskHandle(handle)) throw new Error(`${tool} answered without a task`);
  return handle.outcome();
}

const textOf = (outcome: Awaited<ReturnType<typeof run>>) =>
  outcome.kind === 'completed' ? (outcome.result.content[0] as { text: string }).text : outcome.kind;

describe('ctx.elicit and ctx.confirm', () => {
  it('send a form made from the zod object and hand back its content typed', async () => {
    const made = await server();
    const asked: unknown[] = [];
    const outcome = await run(made, 'deploy', (request): ElicitResult => {
      asked.push(request.params);
      return (request.params as { message: string }).message === 'Deploy where?'
        ? { action: 'accept', content: { env: 'prod', replicas: 3 } }
        : { action: 'accept', content: { confirm: true } };
    });
    expect(textOf(outcome)).toBe('prod x3 confirmed');
    expect(asked[0]).toMatchObject({
      mode: 'form',
      requestedSchema: {
        type: 'object',
        properties: {
          env: { type: 'string', enum: ['staging', 'prod'], description: 'Where to deploy' },
          replicas: { type: 'integer', minimum: 1, default: 2 },
          note: { type: 'string' },
        },
        required: ['env'],
      },
    });
    expect(asked[1]).toMatchObject({ requestedSchema: { properties: { confirm: { type: 'boolean' } } } });
  });

  it('tell decline apart, and take a declined confirmation as no', async () => {
    const made = await server();
    expect(textOf(await run(made, 'deploy', () => ({ action: 'decline' })))).toBe('decline');
    const outcome = await run(made, 'deploy', (request): ElicitResult =>
      (request.params as { message: string }).message === 'Deploy where?'
        ? { action: 'accept', content: { env: 'staging' } }
        : { action: 'cancel' },
    );
    expect(textOf(outcome)).toBe('staging x2 not confirmed');
  });

  it('fail the task, saying why, on content that does not fit the form or a form it cannot send', async () => {
    const made = await server();
    const unfit = await run(made, 'deploy', () => ({ action: 'accept', content: { env: 'moon', replicas: 0 } }));
    expect(unfit).toMatchObject({ kind: 'failed', error: { message: expect.stringMatching(/does not fit its form/) } });
    const nested = await run(made, 'nested', () => ({ action: 'accept', content: {} }));
    expect(nested).toMatchObject({
      kind: 'failed',
      error: { message: expect.stringMatching(/form field inner is "object": an elicitation form holds only/) },
    });
  });
});
