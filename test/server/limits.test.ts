// Resource limits (docs/operations.md, "Limits"), each provoked over real HTTP on a real SQLite file: a refusal names the limit
// and what to do, and nothing over a limit reaches the store.
import type Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import { DEFAULT_LIMITS, measureJson } from '../../src/server/limits.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { OPEN_STATUS_SQL } from '../../src/shared/statusSql.js';
import { rpc } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const LIMITS = {
  maxArgumentsBytes: 1000,
  maxResultBytes: 2000,
  maxJsonDepth: 20,
  maxInputRequestsPerTask: 2,
  maxOpenTasksPerPrincipal: 3,
};
const ALICE = 'alice-token';
const BOB = 'bob-token';

/** Gates a test opens to let a `gated` task finish. */
const gates = new Map<string, () => void>();

function elicit(message: string) {
  return {
    method: 'elicitation/create' as const,
    params: { mode: 'form', message, requestedSchema: { type: 'object', properties: {} } },
  };
}

let server: TestServer;
let db: Database.Database;

beforeAll(async () => {
  server = await startTestServer(
    (tasks) => {
      tasks.registerTool('store_args', { task: { support: 'required' } }, () => ({ content: [] }));
      tasks.registerTool(
        'big_result',
        { inputSchema: z.object({ bytes: z.number().int() }), task: { support: 'required' } },
        ({ bytes }) => ({ content: [{ type: 'text', text: 'r'.repeat(bytes) }] }),
      );
      tasks.registerTool('big_error', { task: { support: 'required' } }, () => {
        throw { code: -32000, message: 'upstream said no', data: { dump: 'e'.repeat(5000) } };
      });
      tasks.registerTool('cyclic_result', { task: { support: 'required' } }, () => {
        const cycle: Record<string, unknown> = {};
        cycle['self'] = cycle;
        return { content: [], structuredContent: cycle };
      });
      tasks.registerTool('three_inputs', { task: { support: 'required' } }, async (_args, ctx) => {
        const a = ctx.input('a', elicit('a'));
        const b = ctx.input('b', elicit('b'));
        let refusal = 'none';
        await ctx.input('c', elicit('c')).catch((error: Error) => (refusal = error.message));
        await a;
        // `a` is answered: one more may be outstanding again
        const d = ctx.input('d', elicit('d'));
        await Promise.all([b, d]);
        return { content: [{ type: 'text', text: refusal }] };
      });
      tasks.registerTool(
        'gated',
        { inputSchema: z.object({ id: z.string() }), task: { support: 'required' } },
        async ({ id }, ctx) => {
          await new Promise<void>((resolve, reject) => {
            gates.set(id, resolve);
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
          });
          return { content: [] };
        },
      );
    },
    { server: LIMITS, serve: { tokens: { [ALICE]: 'alice', [BOB]: 'bob' } } },
  );
  db = openDatabase(server.store.path);
});
afterAll(async () => {
  db.close();
  await server.close();
});

// the tools that ask for input ask for form elicitation, which the requests declare (docs/DESIGN.md rule 6)
const call = (name: string, args: Record<string, unknown>, token = ALICE, meta = {}) =>
  rpc(server.url, 'tools/call', { name, arguments: args }, { token, meta, capabilities: { elicitation: {} } });
const rowCount = () => (db.prepare('SELECT COUNT(*) AS n FROM tasks').get() as { n: number }).n;
const settled = (taskId: string, token = ALICE) =>
  waitFor(`task ${taskId} to settle`, async () => {
    const r = await rpc(server.url, 'tasks/get', { taskId }, { token });
    const status = r.result?.['status'];
    return status === 'completed' || status === 'failed' || status === 'cancelled' ? r.result! : undefined;
  });
async function created(name: string, args: Record<string, unknown>, token = ALICE): Promise<string> {
  const r = await call(name, args, token);
  expect(r.error).toBeUndefined();
  return r.result!['taskId'] as string;
}

describe('maxArgumentsBytes and maxJsonDepth', () => {
  it('refuses arguments over the size limit with -32602 naming it, and stores nothing', async () => {
    const before = rowCount();
    const r = await call('store_args', { blob: 'a'.repeat(1200) });
    expect(r.httpStatus).toBe(200);
    expect(r.error?.code).toBe(-32602);
    expect(r.error?.message).toMatch(/^Arguments for tool store_args are \d+ bytes serialized, over this server's/);
    expect(r.error?.message).toContain('limit of 1000 bytes (maxArgumentsBytes)');
    expect(rowCount()).toBe(before);
    // just under the limit is accepted
    expect((await call('store_args', { blob: 'a'.repeat(900) })).result?.['resultType']).toBe('task');
  });

  it('refuses arguments nested deeper than the limit precisely, not with a stack overflow', async () => {
    const before = rowCount();
    const deep = JSON.parse('{"a":'.repeat(50) + '1' + '}'.repeat(50)) as Record<string, unknown>;
    const r = await call('store_args', deep);
    expect(r.error).toEqual({
      code: -32602,
      message:
        "Arguments for tool store_args are nested deeper than this server's limit of 20 levels (maxJsonDepth): send smaller arguments, or pass large inputs by reference (a URI)",
    });
    expect(rowCount()).toBe(before);
  });
});

describe('maxResultBytes', () => {
  it('fails a task whose result is too large with -32603 naming the limit, and does not store the result', async () => {
    const taskId = await created('big_result', { bytes: 5000 });
    const task = await settled(taskId);
    expect(task['status']).toBe('failed');
    const error = task['error'] as { code: number; message: string };
    expect(error.code).toBe(-32603);
    expect(error.message).toMatch(
      /^Tool big_result returned a result that is \d+ bytes serialized, over this server's/,
    );
    expect(error.message).toContain('limit of 2000 bytes (maxResultBytes); it was not stored');
    const row = db.prepare('SELECT result, error FROM tasks WHERE task_id = ?').get(taskId) as {
      result: string | null;
      error: string;
    };
    expect(row.result).toBeNull();
    expect(row.error).not.toContain('rrrr');
    // a result within the limit is stored as it came
    const small = await settled(await created('big_result', { bytes: 100 }));
    expect(small).toMatchObject({ status: 'completed', result: { content: [{ text: 'r'.repeat(100) }] } });
  });

  it('applies to an error a handler throws, too', async () => {
    const taskId = await created('big_error', {});
    const task = await settled(taskId);
    expect(task['error']).toMatchObject({ code: -32603, message: expect.stringContaining('(maxResultBytes)') });
    const row = db.prepare('SELECT error FROM tasks WHERE task_id = ?').get(taskId) as { error: string };
    expect(row.error).not.toContain('eeee');
  });

  it('fails a cyclic result instead of hanging or crashing the server', async () => {
    const task = await settled(await created('cyclic_result', {}));
    expect(task['error']).toMatchObject({ code: -32603, message: expect.stringContaining('(maxJsonDepth)') });
  });
});

describe('maxInputRequestsPerTask', () => {
  it('throws inside the handler when one more would be outstanding; answered ones free a place', async () => {
    const taskId = await created('three_inputs', {});
    const inputKeys = async () => {
      const r = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
      return Object.keys((r.result?.['inputRequests'] as object | undefined) ?? {}).sort();
    };
    await waitFor('a and b outstanding', async () => ((await inputKeys()).join() === 'a,b' ? true : undefined));
    const answer = (key: string) =>
      rpc(server.url, 'tasks/update', { taskId, inputResponses: { [key]: { action: 'accept' } } }, { token: ALICE });
    await answer('a');
    await waitFor('b and d outstanding', async () => ((await inputKeys()).join() === 'b,d' ? true : undefined));
    await answer('b');
    await answer('d');
    const task = await settled(taskId);
    expect(task['status']).toBe('completed');
    const refusal = ((task['result'] as { content: { text: string }[] }).content[0]!.text ?? '') as string;
    expect(refusal).toBe(
      "input c would be more than this server's limit of 2 outstanding input requests per task (maxInputRequestsPerTask): await earlier ones before asking more",
    );
    // the refused request never reached the store
    const keys = db.prepare('SELECT key FROM task_inputs WHERE task_id = ? ORDER BY seq').all(taskId);
    expect(keys).toEqual([{ key: 'a' }, { key: 'b' }, { key: 'd' }]);
  });
});

describe('maxOpenTasksPerPrincipal', () => {
  it('refuses one more open task per principal with a message saying what to do; other principals are unaffected', async () => {
    // earlier tests may have left open tasks: count alice's from the store
    const open = () =>
      (
        db.prepare(`SELECT COUNT(*) AS n FROM tasks WHERE owner = 'client:alice' AND ${OPEN_STATUS_SQL}`).get() as {
          n: number;
        }
      ).n;
    const ids: string[] = [];
    while (open() < LIMITS.maxOpenTasksPerPrincipal) {
      const r = await call('gated', { id: `open-${ids.length}` }, ALICE, {
        'io.closeout/idempotencyKey': `open-${ids.length}`,
      });
      expect(r.error).toBeUndefined();
      ids.push(r.result!['taskId'] as string);
    }
    const before = rowCount();
    const refused = await call('gated', { id: 'one-too-many' });
    expect(refused.httpStatus).toBe(200);
    expect(refused.error).toEqual({
      code: -32603,
      message:
        "Too many open tasks: this caller already has 3 tasks that have not finished, this server's limit (maxOpenTasksPerPrincipal); wait for some to finish, or cancel them with tasks/cancel, then call again",
      data: { limit: 'maxOpenTasksPerPrincipal', max: 3 },
    });
    expect(rowCount()).toBe(before);

    // an idempotent replay of an open task is not a new task: it is answered at the limit too
    if (ids.length > 0) {
      const replay = await call('gated', { id: 'open-0' }, ALICE, { 'io.closeout/idempotencyKey': 'open-0' });
      expect(replay.result?.['taskId']).toBe(ids[0]);
    }
    // the limit is per principal
    const bobs = await call('gated', { id: 'bob-0' }, BOB);
    expect(bobs.result?.['resultType']).toBe('task');

    // a finished task frees a place
    const open0 = (
      db.prepare(`SELECT task_id FROM tasks WHERE owner = 'client:alice' AND ${OPEN_STATUS_SQL}`).get() as {
        task_id: string;
      }
    ).task_id;
    await rpc(server.url, 'tasks/cancel', { taskId: open0 }, { token: ALICE });
    await settled(open0);
    const again = await call('gated', { id: 'after-cancel' });
    expect(again.result?.['resultType']).toBe('task');
    expect((await call('gated', { id: 'one-too-many-again' })).error?.code).toBe(-32603);
    for (const release of gates.values()) release();
  });
});

describe('HTTP request body (the SDK’s limit)', () => {
  it('answers a body over 4 MiB with 413 and a JSON-RPC error naming the limit; the server stays up', async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { taskId: 'x' } });
    const padded = body.slice(0, -2) + `,"pad":"${'p'.repeat(4 * 1024 * 1024)}"}}`;
    const r = await rpc(server.url, 'tasks/get', { taskId: 'x' }, { token: ALICE, rawBody: padded });
    expect(r.httpStatus).toBe(413);
    expect(r.error).toEqual({ code: -32000, message: 'Payload Too Large: Request body must not exceed 4194304 bytes' });
    // under the body limit, the arguments limit still applies
    const big = await call('store_args', { blob: 'a'.repeat(3 * 1024 * 1024) });
    expect(big.error?.message).toContain('(maxArgumentsBytes)');
    expect((await rpc(server.url, 'tasks/get', { taskId: 'x' }, { token: ALICE })).error?.code).toBe(-32602);
  });
});

describe('configuration', () => {
  it('has the documented defaults and refuses a limit that is not a positive integer', async () => {
    expect(DEFAULT_LIMITS).toEqual({
      maxArgumentsBytes: 1_048_576,
      maxResultBytes: 4_194_304,
      maxJsonDepth: 256,
      maxInputRequestsPerTask: 16,
      maxOpenTasksPerPrincipal: 1000,
      maxStoredTasksPerPrincipal: 100_000,
      maxStepResultBytes: 262_144,
      maxStepsPerTask: 10_000,
      maxStepBytesPerTask: 16_777_216,
      maxListenStreamsPerPrincipal: 16,
      maxSubscribedTasksPerPrincipal: 10_000,
    });
    const store = new SqliteTaskStore(':memory:');
    expect(new TaskServer({ store }).limits).toEqual(DEFAULT_LIMITS);
    expect(new TaskServer({ store, maxOpenTasksPerPrincipal: Infinity }).limits.maxOpenTasksPerPrincipal).toBe(
      Infinity,
    );
    for (const bad of [0, -1, 1.5, NaN]) {
      expect(() => new TaskServer({ store, maxResultBytes: bad })).toThrow(
        /^maxResultBytes must be a positive integer/,
      );
    }
    await store.close();
  });

  it('measureJson bounds its work: a wide value is refused after maxBytes nodes, a deep one after maxDepth levels', () => {
    const wide = Array.from({ length: 10_000 }, () => 0);
    expect(measureJson(wide, 5000, 10)).toEqual({ ok: false, problem: 'too-large', bytes: undefined });
    expect(measureJson([[[[1]]]], 100, 3)).toEqual({ ok: false, problem: 'too-deep' });
    expect(measureJson([[[1]]], 100, 3)).toEqual({ ok: true, bytes: 7 });
    expect(measureJson({ n: 10n }, 100, 3)).toMatchObject({ ok: false, problem: 'not-json' });
    expect(measureJson('é', 100, 3)).toEqual({ ok: true, bytes: 4 });
  });
});
