// Push's periodic check of the subscribed ids (docs/DESIGN.md, "Rules learned in the field", 8): while nothing
// changes it reads no task in full, only each task's version, so its idle cost does not grow with what the tasks hold;
// a change whose hint never reached this server (written by another process on the same SQLite file) is still found,
// and only that task is read in full. Counted through a pass-through wrapper of the real SQLite store.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { serveTaskServer, type ServingTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import type { StoredTask, TaskStore } from '../../src/server/store/taskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { listen, taskNotification, withoutMeta } from '../support/listen.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const TASKS = 40;

/** What the server asked of its store: passes of the check (one per page) and the ids it read in full. */
interface Reads {
  checks: number;
  fullReads: string[];
}

/** The store as it is, every call passed through, counting the reads push's check makes. */
function counting(store: TaskStore, reads: Reads): TaskStore {
  return new Proxy(store, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const answer = (value as (...a: unknown[]) => unknown).apply(target, args);
        if (property === 'taskVersions') reads.checks++;
        if (property === 'getMany' || property === 'get') {
          return (answer as Promise<StoredTask[] | StoredTask | undefined>).then((tasks) => {
            if (property === 'getMany') reads.checks++;
            for (const task of [tasks].flat()) if (task) reads.fullReads.push(task.taskId);
            return tasks;
          });
        }
        return answer;
      };
    },
  });
}

let dir: string;
let store: SqliteTaskStore;
let serving: ServingTaskServer;
const reads: Reads = { checks: 0, fullReads: [] };

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-push-check-'));
  store = new SqliteTaskStore(join(dir, 'tasks.db'));
  const tasks = new TaskServer({
    store: counting(store, reads),
    onError: () => {},
    push: { checkIntervalMs: 100 },
  });
  tasks.registerTool('hold', { task: { support: 'required', pollIntervalMs: 1000 } }, async (_args, ctx) => {
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    return { content: [] };
  });
  serving = await serveTaskServer(tasks, { port: 0 });
});

afterEach(async () => {
  await serving.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Creates held tasks, each with a large argument (what a full read would carry), and follows them on one stream. */
async function followHeldTasks() {
  const taskIds: string[] = [];
  for (let i = 0; i < TASKS; i++) {
    const created = await rpc(serving.url, 'tools/call', { name: 'hold', arguments: { blob: 'x'.repeat(10_000) } });
    taskIds.push(created.result?.['taskId'] as string);
  }
  const stream = await listen(serving.url, taskIds);
  for (const taskId of taskIds) await stream.next(taskNotification(taskId, 'working'));
  return { taskIds, stream };
}

/** Waits (bounded) for `passes` more passes of the check, from now. */
async function checkPasses(passes: number): Promise<void> {
  const from = reads.checks;
  await waitFor(`${passes} passes of the check`, () => (reads.checks >= from + passes ? true : undefined), 30_000);
}

describe("push's periodic check", () => {
  it('reads no task in full while nothing changes, however many are followed', async () => {
    const { stream } = await followHeldTasks();
    await checkPasses(1);
    reads.fullReads.length = 0;
    await checkPasses(3);
    expect(reads.fullReads).toEqual([]);
    stream.abort();
  }, 60_000);

  it('finds a change whose hint never came, and reads only that task in full', async () => {
    const { taskIds, stream } = await followHeldTasks();
    await checkPasses(1);
    reads.fullReads.length = 0;
    // another process on the same file: its write gives this server no hint
    const elsewhere = new SqliteTaskStore(join(dir, 'tasks.db'));
    const changed = taskIds[7]!;
    try {
      expect(await elsewhere.setStatusMessage({ taskId: changed, fence: 1 }, 'written elsewhere', Date.now())).toBe(
        true,
      );
    } finally {
      await elsewhere.close();
    }
    const notified = await stream.next(
      (message) => taskNotification(changed)(message) && message.params?.['statusMessage'] === 'written elsewhere',
      0,
      30_000,
    );
    const answer = await rpc(serving.url, 'tasks/get', { taskId: changed });
    const { resultType: _resultType, _meta: _meta, ...task } = answer.result ?? {};
    expect(withoutMeta(notified.params)).toEqual(task);
    // tasks/get above read it too; the check read nothing else
    expect(new Set(reads.fullReads)).toEqual(new Set([changed]));
    stream.abort();
  }, 60_000);
});
