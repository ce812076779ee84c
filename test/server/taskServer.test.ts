// The server half over real HTTP on a real SQLite file: every rule of SEP-2663 a task tool must keep, as the
// raw wire shows it (task policy, DetailedTask variants, update/cancel semantics, errors, isolation, TTL, idempotency).
import { setTimeout as sleep } from 'node:timers/promises';

import { ProtocolError } from '@modelcontextprotocol/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import { TASK_ID_BYTES } from '../../src/server/taskId.js';
import type { TaskServer } from '../../src/server/taskServer.js';
import { rpc, TASKS } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

/** Runs of each tool, to prove a handler ran exactly as often as it should. */
const runs = new Map<string, number>();
/** Gates a test opens to let a `gated` task finish. */
const gates = new Map<string, () => void>();

function register(tasks: TaskServer): void {
  const count = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);
  tasks.registerTool(
    'plain',
    { inputSchema: z.object({ text: z.string() }), task: { support: 'never' } },
    ({ text }) => ({
      content: [{ type: 'text', text }],
    }),
  );
  tasks.registerTool(
    'gated',
    { inputSchema: z.object({ id: z.string() }), task: { support: 'optional' } },
    async ({ id }, ctx) => {
      count(`gated:${id}`);
      await new Promise<void>((resolve, reject) => {
        gates.set(id, resolve);
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
      });
      return { content: [{ type: 'text', text: `opened ${id}` }] };
    },
  );
  tasks.registerTool('must_task', { task: { support: 'required' } }, () => ({
    content: [{ type: 'text', text: 'ok' }],
  }));
  tasks.registerTool('tool_error', { task: { support: 'optional' } }, () => ({
    content: [{ type: 'text', text: 'bad input' }],
    isError: true,
  }));
  tasks.registerTool('rpc_error', { task: { support: 'optional' } }, () => {
    throw new ProtocolError(-32000, 'upstream refused', { upstream: 'billing' });
  });
  tasks.registerTool('crash', { task: { support: 'optional' } }, () => {
    throw new TypeError('cannot read properties of undefined');
  });
  tasks.registerTool('bad_result', { task: { support: 'optional' } }, () => ({ content: 'not an array' }) as never);
  tasks.registerTool('two_inputs', { task: { support: 'optional' } }, async (_args, ctx) => {
    const ask = (key: string) =>
      ctx.input(key, {
        method: 'elicitation/create',
        params: { mode: 'form', message: key, requestedSchema: { type: 'object', properties: {} } },
      });
    const [a, b] = await Promise.all([ask('a'), ask('b')]);
    return { content: [{ type: 'text', text: `${String(a['action'])}/${String(b['action'])}` }] };
  });
  tasks.registerTool('stubborn', { task: { support: 'optional' } }, async () => {
    // ignores its signal: cancellation must still end it after the grace period
    await sleep(5000);
    return { content: [{ type: 'text', text: 'finished anyway' }] };
  });
  tasks.registerTool('short_lived', { task: { support: 'optional', ttlMs: 300 } }, async (_args, ctx) => {
    await sleep(10_000, undefined, { signal: ctx.signal });
    return { content: [] };
  });
  tasks.registerTool(
    'counted',
    { inputSchema: z.object({ n: z.number().int() }), task: { support: 'optional', pollIntervalMs: 1234 } },
    ({ n }) => {
      count('counted');
      return { content: [{ type: 'text', text: String(n) }] };
    },
  );
}

let server: TestServer;
let url: string;
const ALICE = 'alice-token';
const BOB = 'bob-token';

beforeAll(async () => {
  server = await startTestServer(register, {
    server: { cancelGraceMs: 300, sweepIntervalMs: 50, retentionMs: 200 },
    serve: { tokens: { [ALICE]: 'alice', [BOB]: 'bob' } },
  });
  url = server.url;
});
afterAll(async () => {
  await server.close();
});

const call = (name: string, args: Record<string, unknown> = {}, token = ALICE, declareTasks = true, meta = {}) =>
  rpc(url, 'tools/call', { name, arguments: args }, { token, declareTasks, meta });
const get = (taskId: string, token = ALICE) => rpc(url, 'tasks/get', { taskId }, { token });
const settled = (taskId: string, token = ALICE) =>
  waitFor(`task ${taskId} to settle`, async () => {
    const r = await get(taskId, token);
    const status = r.result?.['status'];
    return status === 'completed' || status === 'failed' || status === 'cancelled' ? r.result! : undefined;
  });
async function createTask(name: string, args: Record<string, unknown> = {}, token = ALICE): Promise<string> {
  // every task here may ask for form input: the request declares it (docs/DESIGN.md rule 6)
  const created = await rpc(url, 'tools/call', { name, arguments: args }, { token, capabilities: { elicitation: {} } });
  expect(created.error).toBeUndefined();
  expect(created.result?.['resultType']).toBe('task');
  return created.result!['taskId'] as string;
}

describe('task creation and policy', () => {
  it('returns a flat CreateTaskResult that tasks/get resolves at once', async () => {
    const created = await call('gated', { id: 'create' });
    expect(created.result).toMatchObject({ resultType: 'task', status: 'working', ttlMs: 3_600_000 });
    expect(created.result).not.toHaveProperty('content');
    const taskId = created.result!['taskId'] as string;
    expect(taskId).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(Buffer.from(taskId, 'base64url').length).toBe(TASK_ID_BYTES);
    expect(typeof created.result!['pollIntervalMs']).toBe('number');
    // spec: MUST NOT return CreateTaskResult until tasks/get for the taskId resolves
    const got = await get(taskId);
    expect(got.result).toMatchObject({ taskId, status: 'working', resultType: 'complete' });
    gates.get('create')?.();
    expect((await settled(taskId))['status']).toBe('completed');
  });

  it('never: a plain result even when the request declared the extension', async () => {
    const r = await call('plain', { text: 'hi' });
    expect(r.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'hi' }] });
    expect(r.result).not.toHaveProperty('taskId');
  });

  it('optional: runs inline toward a request without the extension', async () => {
    const r = await call('counted', { n: 7 }, ALICE, false);
    expect(r.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: '7' }] });
  });

  it('optional: a tool without an input schema also runs inline', async () => {
    const r = await call('tool_error', {}, ALICE, false);
    expect(r.result).toMatchObject({ resultType: 'complete', isError: true, content: [{ text: 'bad input' }] });
  });

  it('required: -32021 naming the extension toward a request without it', async () => {
    const r = await call('must_task', {}, ALICE, false);
    expect(r.error?.code).toBe(-32021);
    expect(r.error?.data).toEqual({ requiredCapabilities: { extensions: { [TASKS]: {} } } });
  });

  it('honours the tool’s fixed poll interval', async () => {
    const created = await call('counted', { n: 1 });
    expect(created.result?.['pollIntervalMs']).toBe(1234);
  });
});

describe('DetailedTask variants', () => {
  it('completed carries the result, also for isError: true', async () => {
    const taskId = await createTask('tool_error');
    const task = await settled(taskId);
    expect(task).toMatchObject({ status: 'completed', result: { isError: true, content: [{ text: 'bad input' }] } });
    // schema 2026-07-28: the inlined CallToolResult carries its own resultType
    expect((task['result'] as { resultType?: string }).resultType).toBe('complete');
  });

  it('failed carries the JSON-RPC error a handler threw', async () => {
    const task = await settled(await createTask('rpc_error'));
    expect(task).toMatchObject({
      status: 'failed',
      error: { code: -32000, message: 'upstream refused', data: { upstream: 'billing' } },
    });
  });

  it('a handler that crashes fails with -32603 and a useful message; the server stays up', async () => {
    const task = await settled(await createTask('crash'));
    expect(task['status']).toBe('failed');
    expect(task['error']).toMatchObject({ code: -32603 });
    expect(String((task['error'] as { message: string }).message)).toContain('crash');
    expect(String((task['error'] as { message: string }).message)).toContain('cannot read properties of undefined');
    expect((await call('plain', { text: 'still up' })).result).toBeDefined();
  });

  it('a result that is not a CallToolResult fails the task, not the server', async () => {
    const task = await settled(await createTask('bad_result'));
    expect(task).toMatchObject({ status: 'failed', error: { code: -32603 } });
  });
});

describe('tasks/update', () => {
  it('accepts partial answers, ignores unknown and answered keys, and resumes when all are in', async () => {
    const taskId = await createTask('two_inputs');
    const waiting = await waitFor('both inputs outstanding', async () => {
      const r = await get(taskId);
      const requests = r.result?.['inputRequests'] as Record<string, unknown> | undefined;
      return requests && Object.keys(requests).length === 2 ? r.result : undefined;
    });
    expect(waiting['status']).toBe('input_required');

    const partial = await rpc(
      url,
      'tasks/update',
      { taskId, inputResponses: { a: { action: 'accept', content: {} } } },
      { token: ALICE },
    );
    expect(partial.result).toMatchObject({ resultType: 'complete' });
    const afterPartial = await get(taskId);
    expect(afterPartial.result?.['status']).toBe('input_required');
    expect(Object.keys(afterPartial.result?.['inputRequests'] as object)).toEqual(['b']);

    // an unknown key and an answered key are acked and ignored
    const ignored = await rpc(
      url,
      'tasks/update',
      { taskId, inputResponses: { nope: { action: 'accept' }, a: { action: 'decline' } } },
      { token: ALICE },
    );
    expect(ignored.error).toBeUndefined();
    expect((await get(taskId)).result?.['status']).toBe('input_required');

    await rpc(url, 'tasks/update', { taskId, inputResponses: { b: { action: 'decline' } } }, { token: ALICE });
    const task = await settled(taskId);
    // the first answer to `a` stands: the later decline was ignored
    expect(task).toMatchObject({ status: 'completed', result: { content: [{ text: 'accept/decline' }] } });
  });

  it('acks an update to a finished task and changes nothing', async () => {
    const taskId = await createTask('tool_error');
    const before = await settled(taskId);
    const r = await rpc(url, 'tasks/update', { taskId, inputResponses: { x: { action: 'accept' } } }, { token: ALICE });
    expect(r.error).toBeUndefined();
    expect((await get(taskId)).result).toEqual(before);
  });
});

describe('tasks/cancel', () => {
  it('acks, aborts the handler, and the task ends cancelled', async () => {
    const taskId = await createTask('gated', { id: 'cancel-me' });
    const r = await rpc(url, 'tasks/cancel', { taskId }, { token: ALICE });
    expect(r.result).toMatchObject({ resultType: 'complete' });
    expect((await settled(taskId))['status']).toBe('cancelled');
  });

  it('is idempotent on a finished task: the terminal state never changes', async () => {
    const taskId = await createTask('tool_error');
    const before = await settled(taskId);
    for (let i = 0; i < 2; i++) {
      expect((await rpc(url, 'tasks/cancel', { taskId }, { token: ALICE })).error).toBeUndefined();
    }
    expect((await get(taskId)).result).toEqual(before);
  });

  it('marks a handler that ignores its signal cancelled after the grace period', async () => {
    const taskId = await createTask('stubborn');
    await rpc(url, 'tasks/cancel', { taskId }, { token: ALICE });
    const started = Date.now();
    expect((await settled(taskId))['status']).toBe('cancelled');
    expect(Date.now() - started).toBeLessThan(3000);
  });
});

describe('errors', () => {
  it('-32602 for an unknown taskId on every task method', async () => {
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      const r = await rpc(url, method, { taskId: 'unknown-task', inputResponses: {} }, { token: ALICE });
      expect(r.error, method).toEqual({ code: -32602, message: 'Failed to retrieve task: Task not found' });
    }
  });

  it('-32021 for tasks/* without the extension capability', async () => {
    const taskId = await createTask('tool_error');
    const r = await rpc(url, 'tasks/get', { taskId }, { token: ALICE, declareTasks: false });
    expect(r.error?.code).toBe(-32021);
    expect(r.error?.data).toEqual({ requiredCapabilities: { extensions: { [TASKS]: {} } } });
  });

  it('tasks/result and tasks/list stay -32601', async () => {
    expect((await rpc(url, 'tasks/result', { taskId: 'x' }, { token: ALICE })).error?.code).toBe(-32601);
    expect((await rpc(url, 'tasks/list', {}, { token: ALICE })).error?.code).toBe(-32601);
  });

  it('Mcp-Name must match the taskId', async () => {
    const taskId = await createTask('tool_error');
    const mismatch = await rpc(url, 'tasks/get', { taskId }, { token: ALICE, headers: { 'mcp-name': 'other' } });
    expect(mismatch.httpStatus).toBe(400);
    expect(mismatch.error?.code).toBe(-32020);
    const missing = await rpc(url, 'tasks/get', { taskId }, { token: ALICE, headers: { 'mcp-name': undefined } });
    expect(missing.httpStatus).toBe(400);
  });

  it('bad input gets a precise -32602 naming the field and changes nothing', async () => {
    const taskId = await createTask('gated', { id: 'bad-input' });
    const before = (await get(taskId)).result;
    const cases: [string, Record<string, unknown>, RegExp][] = [
      ['tasks/get', { taskId: 42 }, /taskId/],
      ['tasks/get', {}, /taskId/],
      ['tasks/get', { taskId: 'x'.repeat(300) }, /taskId must be at most 256/],
      ['tasks/cancel', { taskId: null }, /taskId/],
      ['tasks/update', { taskId, inputResponses: { k: 5 } }, /inputResponses/],
    ];
    for (const [method, params, message] of cases) {
      const headers = typeof params['taskId'] === 'string' ? {} : { 'mcp-name': undefined };
      const r = await rpc(url, method, params, { token: ALICE, headers });
      expect(r.error?.code, `${method} ${JSON.stringify(params).slice(0, 60)}`).toBe(-32602);
      expect(r.error?.message).toMatch(message);
    }
    const badArgs = await call('gated', { id: 5 });
    expect(badArgs.error?.code).toBe(-32602);
    expect(badArgs.error?.message).toMatch(/id/);
    const badKey = await call('counted', { n: 1 }, ALICE, true, { 'io.closeout/idempotencyKey': 17 });
    expect(badKey.error).toMatchObject({ code: -32602, message: expect.stringMatching(/idempotencyKey/) });
    const garbage = await rpc(url, 'tasks/get', {}, { token: ALICE, rawBody: '{"jsonrpc":"2.0",' });
    expect(garbage.error?.code).toBe(-32700);
    expect((await get(taskId)).result).toEqual(before);
    gates.get('bad-input')?.();
  });
});

describe('caller isolation', () => {
  it('another principal gets exactly the unknown-id answer on every method, and changes nothing', async () => {
    const taskId = await createTask('gated', { id: 'alice-only' });
    const unknown = await rpc(url, 'tasks/get', { taskId: 'A'.repeat(32) }, { token: BOB });
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      const r = await rpc(url, method, { taskId, inputResponses: { k: { action: 'accept' } } }, { token: BOB });
      expect(r.error, method).toEqual(unknown.error);
      expect(r.httpStatus).toBe(unknown.httpStatus);
    }
    expect((await get(taskId)).result?.['status']).toBe('working');
    gates.get('alice-only')?.();
    expect((await settled(taskId))['status']).toBe('completed');
  });

  it('requests without a valid token are refused before any task is touched', async () => {
    const r = await rpc(url, 'tasks/get', { taskId: 'x' }, { token: 'forged' });
    expect(r.httpStatus).toBe(401);
  });
});

describe('TTL and retention', () => {
  it('a task past its TTL is failed as expired, then purged and answered as expired', async () => {
    const taskId = await createTask('short_lived');
    const task = await settled(taskId);
    expect(task).toMatchObject({ status: 'failed', ttlMs: 300, error: { code: -32603 } });
    expect(String((task['error'] as { message: string }).message)).toMatch(/expired/i);
    const purged = await waitFor('the purge', async () => {
      const r = await get(taskId);
      return r.error ? r.error : undefined;
    });
    expect(purged).toEqual({ code: -32602, message: 'Failed to retrieve task: Task has expired' });
    // another principal asking about the purged id gets exactly the unknown-id answer
    expect((await get(taskId, BOB)).error).toEqual({
      code: -32602,
      message: 'Failed to retrieve task: Task not found',
    });
  });
});

describe('idempotent creation', () => {
  it('the same owner and key get the same task, and the tool runs once', async () => {
    const before = runs.get('counted') ?? 0;
    const meta = { 'io.closeout/idempotencyKey': 'order-42' };
    const first = await call('counted', { n: 42 }, ALICE, true, meta);
    const second = await call('counted', { n: 42 }, ALICE, true, meta);
    expect(second.result?.['taskId']).toBe(first.result?.['taskId']);
    await settled(first.result!['taskId'] as string);
    expect(runs.get('counted')).toBe(before + 1);
    const bobs = await call('counted', { n: 42 }, BOB, true, meta);
    expect(bobs.result?.['taskId']).not.toBe(first.result?.['taskId']);
  });

  it('refuses a key reused for another tool or other arguments, naming the conflict, and runs nothing', async () => {
    // invariant (docs/DESIGN.md rule 5): a key is bound to its tool and arguments; a business id reused by another
    // caller of the same principal (`anonymous` without auth) never hands over the first call's task or result
    const before = runs.get('counted') ?? 0;
    const meta = { 'io.closeout/idempotencyKey': 'release-42' };
    const first = await call('counted', { n: 7 }, ALICE, true, meta);
    const taskId = first.result?.['taskId'] as string;
    await settled(taskId);
    const otherTool = await call('gated', { id: 'release-42' }, ALICE, true, meta);
    expect(otherTool.error).toMatchObject({
      code: -32602,
      message: expect.stringMatching(/release-42.*counted.*not gated/),
    });
    const otherArgs = await call('counted', { n: 8 }, ALICE, true, meta);
    expect(otherArgs.error).toMatchObject({
      code: -32602,
      message: expect.stringMatching(/release-42.*other arguments/),
    });
    expect(JSON.stringify([otherTool, otherArgs])).not.toContain(taskId);
    // the same call still gets its task back, arguments compared as values (key order does not matter)
    const again = await call('counted', { n: 7 }, ALICE, true, meta);
    expect(again.result?.['taskId']).toBe(taskId);
    expect(runs.get('counted')).toBe(before + 1);
    expect(runs.get('gated:release-42')).toBeUndefined();
  });
});

describe('storage failure', () => {
  it('answers -32603 with a clear message when the store is gone', async () => {
    const broken = await startTestServer(register);
    await broken.store.close();
    const r = await rpc(broken.url, 'tasks/get', { taskId: 'x' });
    expect(r.error?.code).toBe(-32603);
    expect(r.error?.message).toMatch(/Task store unavailable/);
    const created = await rpc(broken.url, 'tools/call', { name: 'counted', arguments: { n: 1 } });
    expect(created.error?.code).toBe(-32603);
    await broken.close();
  });
});
