// Invariant (docs/DESIGN.md rule 6; core MRTR: servers MUST NOT send input requests the client has not declared, nor
// elicitation modes it does not support): a task's handler may raise input only of the kinds the request that created
// the task declared. An undeclared kind throws InputNotDeclaredError inside the handler, which the tool may catch and
// fall back from; uncaught, the task ends `failed` with -32021. The declaration is kept with the task in the store, so
// it still holds when the task is re-run after a restart.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { InputRequest } from '../../src/protocol/index.js';
import { InputNotDeclaredError } from '../../src/server/index.js';
import type { TaskServer } from '../../src/server/taskServer.js';
import { rpc } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const FORM: InputRequest = {
  method: 'elicitation/create',
  params: { mode: 'form', message: 'Approve?', requestedSchema: { type: 'object', properties: {} } },
};
const FORM_NO_MODE: InputRequest = {
  method: 'elicitation/create',
  params: { message: 'Approve?', requestedSchema: { type: 'object', properties: {} } },
};
const URL_MODE: InputRequest = {
  method: 'elicitation/create',
  params: { mode: 'url', message: 'Sign in', url: 'https://example.com/login', elicitationId: 'e-1' },
};
const SAMPLING: InputRequest = {
  method: 'sampling/createMessage',
  params: { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 10 },
};
const ROOTS: InputRequest = { method: 'roots/list', params: {} };

const ASKS: Record<string, InputRequest> = {
  ask_form: FORM,
  ask_form_no_mode: FORM_NO_MODE,
  ask_url: URL_MODE,
  ask_sampling: SAMPLING,
  ask_roots: ROOTS,
};

function register(tasks: TaskServer): void {
  for (const [name, request] of Object.entries(ASKS)) {
    tasks.registerTool(name, { task: { support: 'required' } }, async (_args, ctx) => {
      const answer = await ctx.input('q', request);
      return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
    });
  }
  tasks.registerTool('ask_or_default', { task: { support: 'required' } }, async (_args, ctx) => {
    try {
      await ctx.input('approve', FORM);
      return { content: [{ type: 'text', text: 'asked' }] };
    } catch (error) {
      if (!(error instanceof InputNotDeclaredError)) throw error;
      return { content: [{ type: 'text', text: `fell back: ${error.kind} ${error.key}` }] };
    }
  });
}

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer(register, { server: { sweepIntervalMs: 50 } });
});
afterAll(async () => {
  await server.close();
});

async function start(url: string, tool: string, capabilities: Record<string, unknown>): Promise<string> {
  const created = await rpc(url, 'tools/call', { name: tool, arguments: {} }, { capabilities });
  expect(created.error).toBeUndefined();
  expect(created.result?.['resultType']).toBe('task');
  return created.result!['taskId'] as string;
}

/** The task once it has left `working`: input_required, or terminal. */
async function nextState(url: string, taskId: string): Promise<Record<string, unknown>> {
  return waitFor(`task ${taskId} to leave working`, async () => {
    const answer = await rpc(url, 'tasks/get', { taskId });
    return answer.result?.['status'] === 'working' ? undefined : answer.result;
  });
}

describe('input of declared kinds only', () => {
  it.each([
    ['ask_form', {}, 'elicitation'],
    ['ask_form_no_mode', {}, 'elicitation'],
    ['ask_form', { elicitation: { url: {} } }, 'elicitation.form'],
    ['ask_url', {}, 'elicitation'],
    ['ask_url', { elicitation: {} }, 'elicitation.url'],
    ['ask_url', { elicitation: { form: {} } }, 'elicitation.url'],
    ['ask_sampling', { elicitation: {}, roots: {} }, 'sampling'],
    ['ask_roots', { elicitation: {}, sampling: {} }, 'roots'],
  ])('%s from a client declaring %j fails the task with -32021 naming %s', async (tool, capabilities, needs) => {
    const taskId = await start(server.url, tool, capabilities);
    const task = await nextState(server.url, taskId);
    expect(task['status']).toBe('failed');
    const error = task['error'] as { code: number; message: string; data: unknown };
    expect(error.code).toBe(-32021);
    expect(error.message).toContain(`did not declare ${needs} in its client capabilities`);
    expect(error.message).toContain(`Tool ${tool} asked for input "q"`);
    expect(error.data).toMatchObject({ requiredCapabilities: {} });
    // nothing was ever asked of the client
    expect((await server.store.get(taskId))?.inputs).toEqual([]);
  });

  it.each([
    ['ask_form', { elicitation: {} }],
    ['ask_form_no_mode', { elicitation: { form: {} } }],
    ['ask_url', { elicitation: { url: {} } }],
    ['ask_url', { elicitation: { form: {}, url: {} } }],
    ['ask_sampling', { sampling: {} }],
    ['ask_roots', { roots: {} }],
  ])('%s from a client declaring %j raises input_required', async (tool, capabilities) => {
    const taskId = await start(server.url, tool, capabilities);
    const task = await nextState(server.url, taskId);
    expect(task['status']).toBe('input_required');
    expect(task['inputRequests']).toEqual({ q: ASKS[tool] });
    await rpc(server.url, 'tasks/cancel', { taskId });
  });

  it('lets the tool catch the typed error and fall back', async () => {
    const taskId = await start(server.url, 'ask_or_default', {});
    const task = await nextState(server.url, taskId);
    expect(task['status']).toBe('completed');
    expect(task['result']).toMatchObject({ content: [{ type: 'text', text: 'fell back: elicitation approve' }] });
  });

  it('names the missing capability in data.requiredCapabilities', async () => {
    const taskId = await start(server.url, 'ask_url', { elicitation: {} });
    const task = await nextState(server.url, taskId);
    expect((task['error'] as { data: unknown }).data).toEqual({
      requiredCapabilities: { elicitation: { url: {} } },
    });
  });
});

describe('the declaration survives a restart', () => {
  it('a resumable task re-run by a new instance still asks only for what its creating request declared', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'closeout-caps-'));
    const dbPath = join(dir, 'tasks.db');
    // first life: the handler waits forever; second life: it asks at once
    const resumable = (tasks: TaskServer, ask: boolean) =>
      tasks.registerTool('resumable_ask', { task: { support: 'required', resumable: true } }, async (_args, ctx) => {
        if (!ask) await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', reject));
        const answer = await ctx.input('q', FORM);
        return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
      });
    try {
      const first = await startTestServer((tasks) => resumable(tasks, false), { dbPath, server: { leaseMs: 300 } });
      const refused = await start(first.url, 'resumable_ask', {});
      const allowed = await start(first.url, 'resumable_ask', { elicitation: {} });
      // close hands the leases back; the store file stays (dbPath is outside the server's own dir)
      await first.tasks.close();
      await first.close();

      const second = await startTestServer((tasks) => resumable(tasks, true), { dbPath, server: { leaseMs: 300 } });
      try {
        const refusedTask = await nextState(second.url, refused);
        expect(refusedTask['status']).toBe('failed');
        expect((refusedTask['error'] as { code: number }).code).toBe(-32021);
        const allowedTask = await nextState(second.url, allowed);
        expect(allowedTask['status']).toBe('input_required');
        expect((await second.store.get(allowed))?.attempt).toBe(2);
      } finally {
        await second.tasks.close();
        await second.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
