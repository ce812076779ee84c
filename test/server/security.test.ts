// Security of the server half: task ids are >= 128 bits from a CSPRNG; the SQLite store is owner-only; for
// every task method a second principal gets exactly what an unknown id gets: same code, message, HTTP status and
// timing class, whatever state the task is in.
import { readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { newTaskId, TASK_ID_BYTES } from '../../src/server/taskId.js';
import { rpc, type RpcResponse } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

describe('task ids', () => {
  it('come from node:crypto randomBytes with at least 128 bits, and nothing else', () => {
    const source = readFileSync(fileURLToPath(new URL('../../src/server/taskId.ts', import.meta.url)), 'utf8');
    expect(source).toMatch(/import \{ randomBytes \} from 'node:crypto';/);
    expect(source).toMatch(/return randomBytes\(TASK_ID_BYTES\)\.toString\('base64url'\);/);
    expect(source).not.toMatch(/Math\.random|Date\.now|performance\.now|process\.hrtime/);
    expect(TASK_ID_BYTES * 8).toBeGreaterThanOrEqual(128);
  });

  it('are distinct, url-safe, carry TASK_ID_BYTES bytes each, and every bit is a fair coin', () => {
    const count = 10_000;
    const ids = Array.from({ length: count }, () => newTaskId());
    expect(new Set(ids).size).toBe(count);
    const ones = new Array<number>(TASK_ID_BYTES * 8).fill(0);
    for (const id of ids) {
      expect(id).toMatch(/^[A-Za-z0-9_-]+$/);
      const bytes = Buffer.from(id, 'base64url');
      expect(bytes.length).toBe(TASK_ID_BYTES);
      expect(bytes.toString('base64url')).toBe(id);
      for (let bit = 0; bit < ones.length; bit++) ones[bit]! += (bytes[bit >> 3]! >> (bit & 7)) & 1;
    }
    // a counter, a timestamp or a short seed leaves some bits stuck; a fair bit is 50% +- 0.5% (1 sd) here
    for (const n of ones) expect(Math.abs(n / count - 0.5)).toBeLessThan(0.05);
  });
});

describe('the SQLite store file', () => {
  it('is created owner-only (0600) with its WAL and shared-memory files, whatever the umask', async () => {
    const previous = process.umask(0o000);
    let server: TestServer | undefined;
    try {
      server = await startTestServer((tasks) => {
        tasks.registerTool('t', { task: { support: 'required' } }, () => ({ content: [] }));
      });
      expect((await rpc(server.url, 'tools/call', { name: 't', arguments: {} })).result?.['resultType']).toBe('task');
      for (const suffix of ['', '-wal', '-shm']) {
        expect((statSync(`${server.store.path}${suffix}`).mode & 0o777).toString(8), suffix || 'db').toBe('600');
      }
    } finally {
      process.umask(previous);
      await server?.close();
    }
  });
});

describe('isolation between principals', () => {
  const ALICE = 'alice-token';
  const BOB = 'bob-token';
  const gates: (() => void)[] = [];
  let server: TestServer;
  /** One task of alice's in each state. */
  const tasksOfAlice: Record<string, string> = {};

  beforeAll(async () => {
    server = await startTestServer(
      (tasks) => {
        tasks.registerTool('done', { task: { support: 'required' } }, () => ({
          content: [{ type: 'text', text: 'alice secret result' }],
        }));
        tasks.registerTool('fails', { task: { support: 'required' } }, () => {
          throw { code: -32000, message: 'alice secret error' };
        });
        tasks.registerTool('gated', { task: { support: 'required' } }, async (_args, ctx) => {
          await new Promise<void>((resolve, reject) => {
            gates.push(resolve);
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
          });
          return { content: [] };
        });
        tasks.registerTool('asks', { task: { support: 'required' } }, async (_args, ctx) => {
          const answer = await ctx.input('secret', {
            method: 'elicitation/create',
            params: { mode: 'form', message: 'alice only', requestedSchema: { type: 'object', properties: {} } },
          });
          return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
        });
      },
      { serve: { tokens: { [ALICE]: 'alice', [BOB]: 'bob' } } },
    );
    const create = async (name: string) => {
      const r = await rpc(
        server.url,
        'tools/call',
        { name, arguments: { for: 'alice' } },
        { token: ALICE, capabilities: { elicitation: {} } },
      );
      return r.result!['taskId'] as string;
    };
    const reach = (taskId: string, status: string) =>
      waitFor(`${taskId} ${status}`, async () => {
        const r = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
        return r.result?.['status'] === status ? true : undefined;
      });
    tasksOfAlice['completed'] = await create('done');
    tasksOfAlice['failed'] = await create('fails');
    tasksOfAlice['working'] = await create('gated');
    tasksOfAlice['input_required'] = await create('asks');
    tasksOfAlice['cancelled'] = await create('gated');
    await rpc(server.url, 'tasks/cancel', { taskId: tasksOfAlice['cancelled'] }, { token: ALICE });
    for (const [status, taskId] of Object.entries(tasksOfAlice)) await reach(taskId, status);
  });
  afterAll(async () => {
    for (const open of gates) open();
    await server.close();
  });

  const METHODS = {
    'tasks/get': () => ({}),
    'tasks/update': () => ({ inputResponses: { secret: { action: 'accept', content: { by: 'bob' } } } }),
    'tasks/cancel': () => ({}),
  };
  const ask = (method: string, taskId: string, token: string) =>
    rpc(server.url, method, { taskId, ...METHODS[method as keyof typeof METHODS]() }, { token });
  const visible = (r: RpcResponse) => ({ httpStatus: r.httpStatus, result: r.result, error: r.error });

  it('answers another principal exactly as an unknown id on every method, in every state, and changes nothing', async () => {
    const before = await Promise.all(
      Object.values(tasksOfAlice).map(async (taskId) => (await ask('tasks/get', taskId, ALICE)).result),
    );
    for (const method of Object.keys(METHODS)) {
      // an unknown id of the same shape as a real one
      const unknown = visible(await ask(method, newTaskId(), BOB));
      expect(unknown.error, method).toEqual({ code: -32602, message: 'Failed to retrieve task: Task not found' });
      for (const [status, taskId] of Object.entries(tasksOfAlice)) {
        expect(visible(await ask(method, taskId, BOB)), `${method} on a ${status} task`).toEqual(unknown);
      }
    }
    const after = await Promise.all(
      Object.values(tasksOfAlice).map(async (taskId) => (await ask('tasks/get', taskId, ALICE)).result),
    );
    // the suggested pollIntervalMs grows with a task's age on its own; nothing else may move, lastUpdatedAt included
    const stable = (task: Record<string, unknown> | undefined) => ({ ...task, pollIntervalMs: undefined });
    expect(after.map(stable)).toEqual(before.map(stable));
  });

  it('takes the same time class for another principal’s id as for an unknown id', async () => {
    // medians over interleaved requests, compared with a loose factor: a gross difference (a second store read, a
    // decryption, a sleep on one path) shows, scheduler noise does not
    const rounds = 150;
    const unknownMs: number[] = [];
    const othersMs: number[] = [];
    const time = async (taskId: string) => {
      const started = performance.now();
      const r = await rpc(server.url, 'tasks/get', { taskId }, { token: BOB });
      expect(r.error?.code).toBe(-32602);
      return performance.now() - started;
    };
    const ids = Object.values(tasksOfAlice);
    for (let i = 0; i < 20; i++) await time(newTaskId()); // warm up
    for (let i = 0; i < rounds; i++) {
      // alternate which goes first so drift and caching favour neither
      if (i % 2 === 0) {
        unknownMs.push(await time(newTaskId()));
        othersMs.push(await time(ids[i % ids.length]!));
      } else {
        othersMs.push(await time(ids[i % ids.length]!));
        unknownMs.push(await time(newTaskId()));
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    const [u, o] = [median(unknownMs), median(othersMs)];
    expect(
      Math.max(u, o) / Math.min(u, o),
      `medians: unknown ${u.toFixed(2)} ms, other's ${o.toFixed(2)} ms`,
    ).toBeLessThan(3);
  });
});
