// The same key means the same thing on every store (docs/DESIGN.md rule 14), over real HTTP on SQLite and on a real
// PostgreSQL: a key or id a store could not keep as it was sent (a NUL, which PostgreSQL's text refuses; a lone
// surrogate, which has no UTF-8 form and became U+FFFD, so `x\ud800` and `x\udc00` were one task) is refused with
// -32602 naming the field, identically on both, and no task is created; arguments keep such strings exactly (JSON
// text); a handler's status message and thrown error holding them end the task, with the same message on both; and a
// listen asking for more task ids than any caller may follow is the caller's mistake (-32602), not the server's.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serveTaskServer } from '../../src/server/http.js';
import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import type { TaskStore } from '../../src/server/store/taskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { listen } from '../support/listen.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const KEY_META = 'io.closeout/idempotencyKey';
const KEY_FIELD = `_meta["${KEY_META}"]`;

interface Served {
  url: string;
  errors: Error[];
  close(): Promise<void>;
}

let postgres: StartedPostgres;
const dirs: string[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
}, 180_000);

afterAll(async () => {
  await postgres?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const STORES: Record<string, () => Promise<TaskStore>> = {
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'closeout-unstorable-'));
    dirs.push(dir);
    return new SqliteTaskStore(join(dir, 'tasks.db'));
  },
  postgres: async () =>
    PostgresTaskStore.open((await postgres.createDatabase()).connectionString, { onError: () => {} }),
};

async function serve(store: TaskStore, limits: { maxSubscribedTasksPerPrincipal?: number } = {}): Promise<Served> {
  const errors: Error[] = [];
  const tasks = new TaskServer({ store, onError: (error) => errors.push(error), ...limits });
  tasks.registerTool('echo', { task: { support: 'required' } }, async (args) => ({
    content: [{ type: 'text', text: JSON.stringify(args) }],
  }));
  tasks.registerTool('odd', { task: { support: 'required' } }, async (args, ctx) => {
    await ctx.status(String(args['status']));
    throw new Error(String(args['thrown']));
  });
  const serving = await serveTaskServer(tasks, { port: 0 });
  return {
    url: serving.url,
    errors,
    close: async () => {
      await serving.close();
      await store.close();
    },
  };
}

/** The Mcp-Name header for a taskId no plain header can carry (SEP-2243's Base64 form). */
const encodedName = (taskId: string) => `=?base64?${Buffer.from(taskId, 'utf8').toString('base64')}?=`;

const call = (url: string, name: string, args: Record<string, unknown>, key?: string) =>
  rpc(url, 'tools/call', { name, arguments: args }, key === undefined ? {} : { meta: { [KEY_META]: key } });

const onTask = (url: string, method: string, params: { taskId: string } & Record<string, unknown>) =>
  rpc(url, method, params, { headers: { 'mcp-name': encodedName(params.taskId) } });

async function terminal(url: string, taskId: string): Promise<Record<string, unknown>> {
  return waitFor(
    `task ${taskId} to end`,
    async () => {
      const task = (await rpc(url, 'tasks/get', { taskId })).result;
      const status = task?.['status'];
      return status === 'completed' || status === 'failed' || status === 'cancelled' ? task : undefined;
    },
    20_000,
  );
}

/** What each store answered, by store name, for the parity checks at the end. */
const answers: Record<string, Record<string, unknown>> = {};

for (const [storeName, open] of Object.entries(STORES)) {
  describe(`on ${storeName}`, () => {
    let server: Served;
    const seen: Record<string, unknown> = {};
    answers[storeName] = seen;

    beforeAll(async () => {
      server = await serve(await open());
    }, 60_000);
    afterAll(async () => server?.close());

    it('refuses an idempotency key holding NUL or a lone surrogate with -32602 naming the field, creating nothing', async () => {
      for (const [label, key] of [
        ['nul', 'release\u000042'],
        ['high', 'x\ud800'],
        ['low', 'x\udc00'],
        ['reversed', 'x\udc00\ud800'],
      ] as const) {
        const answer = await call(server.url, 'echo', {}, key);
        expect(answer.error, `${label} key`).toMatchObject({ code: -32602 });
        expect(answer.error!.message, `${label} key`).toContain(`${KEY_FIELD} must be well-formed Unicode text`);
        seen[`key ${label}`] = answer;
      }
      // well-formed keys, astral characters among them, are distinct keys and each is the same task when repeated
      const a = await call(server.url, 'echo', {}, 'x\ud83d\ude00');
      const b = await call(server.url, 'echo', {}, 'x\ud83d\ude01');
      const again = await call(server.url, 'echo', {}, 'x\ud83d\ude00');
      expect(a.result?.['taskId']).toEqual(expect.any(String));
      expect(b.result?.['taskId']).toEqual(expect.any(String));
      expect(b.result?.['taskId']).not.toBe(a.result?.['taskId']);
      expect(again.result?.['taskId']).toBe(a.result?.['taskId']);
      expect(server.errors).toEqual([]);
    });

    it('refuses such a taskId on tasks/get, tasks/cancel, tasks/update and a listen with -32602 naming it', async () => {
      for (const method of ['tasks/get', 'tasks/cancel', 'tasks/update']) {
        const answer = await onTask(server.url, method, {
          taskId: 'task\u0000id',
          ...(method === 'tasks/update' && { inputResponses: {} }),
        });
        expect(answer.error, method).toMatchObject({ code: -32602 });
        expect(answer.error!.message, method).toContain('taskId must be well-formed Unicode text');
        seen[method] = answer;
      }
      const stream = await listen(server.url, ['fine', 'task\u0000id']);
      const refusal = await stream.next((message) => message.error !== undefined);
      stream.abort();
      expect(refusal.error).toMatchObject({ code: -32602 });
      expect(refusal.error!.message).toContain('notifications.taskIds[1] must be well-formed Unicode text');
      seen['listen'] = refusal.error;
      expect(server.errors).toEqual([]);
    });

    it('refuses an inputResponses key holding NUL with -32602', async () => {
      const created = await call(server.url, 'echo', {});
      const taskId = created.result!['taskId'] as string;
      const answer = await rpc(server.url, 'tasks/update', { taskId, inputResponses: { 'k\u0000': { action: 'x' } } });
      expect(answer.error).toMatchObject({ code: -32602 });
      expect(answer.error!.message).toContain('an input key must be well-formed Unicode text');
      seen['update key'] = answer;
    });

    it('keeps arguments holding NUL and lone surrogates exactly (JSON text)', async () => {
      const args = { nul: 'a\u0000b', high: 'x\ud800', low: 'x\udc00', pair: '\ud83d\ude00' };
      const created = await call(server.url, 'echo', args);
      expect(created.error).toBeUndefined();
      const done = await terminal(server.url, created.result!['taskId'] as string);
      expect(done['status']).toBe('completed');
      const text = (done['result'] as { content: { text: string }[] }).content[0]!.text;
      expect(JSON.parse(text)).toEqual(args);
      expect(server.errors).toEqual([]);
    });

    it('ends a task whose handler reports and throws such text, with U+FFFD in its status message', async () => {
      const created = await call(server.url, 'odd', { status: 'half\u0000way \ud800', thrown: 'bad\u0000 \udc00' });
      const done = await terminal(server.url, created.result!['taskId'] as string);
      expect(done).toMatchObject({ status: 'failed', statusMessage: 'Tool odd failed: bad\ufffd \ufffd' });
      // the error object is JSON text: kept as thrown
      expect((done['error'] as { message: string }).message).toBe('Tool odd failed: bad\u0000 \udc00');
      seen['thrown'] = { statusMessage: done['statusMessage'], error: done['error'] };
      expect(server.errors).toEqual([]);
    });

    it('answers -32602 to a listen asking for more task ids than any caller may follow', async () => {
      const taskIds = Array.from({ length: 10_001 }, (_, i) => `task-${i}`);
      const stream = await listen(server.url, taskIds);
      const refusal = await stream.next((message) => message.error !== undefined);
      stream.abort();
      expect(refusal.error).toMatchObject({
        code: -32602,
        data: { limit: 'maxSubscribedTasksPerPrincipal', max: 10_000 },
      });
      expect(refusal.error!.message).toContain('notifications.taskIds lists 10001 distinct task ids');
      seen['listen over'] = refusal.error;
    });
  });
}

describe('both stores', () => {
  it('answered every refusal above alike', () => {
    expect(Object.keys(answers['sqlite']!).length).toBeGreaterThan(8);
    expect(answers['postgres']).toEqual(answers['sqlite']);
  });
});
