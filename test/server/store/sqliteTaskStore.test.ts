import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import { OpenTaskLimitError } from '../../../src/server/store/taskStore.js';
import { openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';
import { describeTaskStoreContract } from '../../../src/testing/index.js';
import { newTask } from '../../support/newTask.js';

describeTaskStoreContract('SqliteTaskStore', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'closeout-sqlite-'));
  const path = join(dir, 'tasks.db');
  const store = new SqliteTaskStore(path);
  return {
    store,
    openSecond: async () => new SqliteTaskStore(path),
    cleanup: async () => {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describe('SqliteTaskStore per-principal counts', () => {
  it('keeps each principal’s open and stored counts in step with its tasks through every write', async () => {
    // the limits at creation read these counts (schema version 10) instead of counting the principal's tasks, which
    // cost a create 14 ms at 100,000 stored tasks; wrong counts would refuse or admit creates wrongly
    const dir = await mkdtemp(join(tmpdir(), 'closeout-sqlite-counts-'));
    const path = join(dir, 'tasks.db');
    const store = new SqliteTaskStore(path);
    try {
      const now = Date.now();
      const leases = [];
      for (const [principal, n] of [
        ['alice', 4],
        ['bob', 2],
      ] as const) {
        for (let i = 0; i < n; i++) {
          const { task } = await store.create(
            newTask(now, { taskId: `${principal}-${i}`, principal, ...(i === 0 && { ttlMs: 1 }) }),
          );
          leases.push({ taskId: task.taskId, fence: task.fence });
        }
      }
      await store.finish(leases[1]!, { status: 'completed', result: { content: [] } }, now);
      // alice-0 and bob-0 expire (TTL 1 ms), then alice-0 is purged once past its retention
      await store.expireOverdue(now + 10);
      await store.purge(now + 20, 5, { limit: 100 });
      const counted = () => {
        const db = openDatabase(path, { readonly: true });
        try {
          const actual = db
            .prepare(
              `SELECT owner, SUM(status IN ('working','input_required')) AS open_tasks, COUNT(*) AS stored_tasks
               FROM tasks GROUP BY owner ORDER BY owner`,
            )
            .all();
          const kept = db
            .prepare(
              'SELECT owner, open_tasks, stored_tasks FROM principal_tasks WHERE stored_tasks > 0 ORDER BY owner',
            )
            .all();
          return { actual, kept };
        } finally {
          db.close();
        }
      };
      const { actual, kept } = counted();
      expect(kept).toEqual(actual);
      expect(actual.length).toBeGreaterThan(0);
      // and the limits read them: alice has 2 open tasks left
      await expect(store.create(newTask(now, { taskId: 'alice-over', maxOpenTasksForPrincipal: 2 }))).rejects.toThrow();
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('SqliteTaskStore file', () => {
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'closeout-sqlite-'));
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('creates the database file, and its write-ahead log, readable by the owner only', async () => {
    // invariant: the store holds every caller's arguments and results, so nobody but its owner may read it
    const path = join(dir, 'tasks.db');
    const previousUmask = process.umask(0o000);
    let store: SqliteTaskStore;
    try {
      store = new SqliteTaskStore(path);
      await store.create({
        taskId: 'task-mode',
        principal: 'alice',
        toolName: 'echo',
        arguments: {},
        createdAt: 1,
        ttlMs: null,
        pollIntervalMs: 1000,
        resumable: false,
        leaseHolder: 'instance-a',
        leaseExpiresAt: 2,
      });
    } finally {
      process.umask(previousUmask);
    }
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect((await stat(`${path}-wal`)).mode & 0o777).toBe(0o600);
    await store.close();
  });

  it('keeps tasks across a close and a reopen of the same file', async () => {
    // invariant: durability: a committed task survives the process that wrote it
    const path = join(dir, 'tasks.db');
    const first = new SqliteTaskStore(path);
    const { task } = await first.create({
      taskId: 'task-durable',
      principal: 'alice',
      toolName: 'echo',
      arguments: { a: 1 },
      createdAt: 1,
      ttlMs: 1000,
      pollIntervalMs: 1000,
      resumable: true,
      leaseHolder: 'instance-a',
      leaseExpiresAt: 2,
    });
    await first.close();
    const second = new SqliteTaskStore(path);
    expect(await second.get('task-durable')).toEqual(task);
    await second.close();
  });
});

describe('SqliteTaskStore group commit', () => {
  let dir: string;
  let path: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'closeout-sqlite-group-'));
    path = join(dir, 'tasks.db');
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Frames in the write-ahead log since `walFrames` last truncated it (one commit writes each page it changed once). */
  const walFrames = (db: Database.Database, mode: 'PASSIVE' | 'TRUNCATE') =>
    (db.pragma(`wal_checkpoint(${mode})`) as Array<{ log: number }>)[0]!.log;

  it('commits the creates and results of one turn of the event loop in one transaction', async () => {
    // every commit is an fsync at synchronous=FULL: sixteen requests arriving together cost one, not sixteen (RESULTS
    // section 1, b/a); with the automatic checkpoint on the serving connection, nothing resets the log in between
    const store = new SqliteTaskStore(path, { backgroundCheckpoints: false });
    const observer = openDatabase(path);
    try {
      walFrames(observer, 'TRUNCATE');
      const now = Date.now();
      const created = await Promise.all(Array.from({ length: 16 }, () => store.create(newTask(now))));
      const afterCreates = walFrames(observer, 'PASSIVE');
      const outcome = { status: 'completed', result: { content: [] } } as const;
      const finished = await Promise.all(
        created.map(({ task }) => store.finish({ taskId: task.taskId, fence: task.fence }, outcome, now)),
      );
      const afterFinishes = walFrames(observer, 'PASSIVE') - afterCreates;
      expect(finished).toEqual(Array(16).fill(true));
      // one commit per write would have written at least one frame each: 16 and 16
      expect(afterCreates).toBeLessThan(16);
      expect(afterFinishes).toBeLessThan(16);
      expect(await store.get(created[15]!.task.taskId)).toMatchObject({ status: 'completed' });
    } finally {
      observer.close();
      await store.close();
    }
  });

  it('refuses one write of a group alone: the others of its turn are committed', async () => {
    const store = new SqliteTaskStore(path);
    try {
      const now = Date.now();
      const held = (await store.create(newTask(now, { taskId: 'held' }))).task;
      const outcomes = await Promise.allSettled([
        ...Array.from({ length: 4 }, (_, i) =>
          store.create(newTask(now, { taskId: `limited-${i}`, maxOpenTasksForPrincipal: 3 })),
        ),
        // a stale fence: not this holder's task any more, answered false, nothing written
        store.finish({ taskId: 'held', fence: held.fence + 1 }, { status: 'completed', result: { content: [] } }, now),
        store.finish(
          { taskId: 'held', fence: held.fence },
          { status: 'failed', error: { code: -1, message: 'x' } },
          now,
        ),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual([
        'fulfilled',
        'fulfilled',
        'rejected',
        'rejected',
        'fulfilled',
        'fulfilled',
      ]);
      expect(outcomes.slice(2, 4).map((o) => (o as PromiseRejectedResult).reason)).toEqual([
        expect.any(OpenTaskLimitError),
        expect.any(OpenTaskLimitError),
      ]);
      expect(outcomes.slice(4).map((o) => (o as PromiseFulfilledResult<boolean>).value)).toEqual([false, true]);
      expect(await store.get('limited-1')).toBeDefined();
      expect(await store.get('limited-2')).toBeUndefined();
      expect(await store.get('held')).toMatchObject({ status: 'failed' });
    } finally {
      await store.close();
    }
  });

  it('fails every write of a group, storing none, when its commit cannot have the write lock', async () => {
    // a real lock: another connection holds the file's write transaction past the store's busy timeout
    const store = new SqliteTaskStore(path, { busyTimeoutMs: 100 });
    const other = openDatabase(path);
    try {
      const now = Date.now();
      other.exec('BEGIN IMMEDIATE');
      const outcomes = await Promise.allSettled(
        Array.from({ length: 3 }, (_, i) => store.create(newTask(now, { taskId: `locked-${i}` }))),
      );
      other.exec('ROLLBACK');
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
      expect(String((outcomes[0] as PromiseRejectedResult).reason)).toMatch(/locked|busy/i);
      for (let i = 0; i < 3; i++) expect(await store.get(`locked-${i}`)).toBeUndefined();
      // the lock gone, the same creates go through
      await store.create(newTask(now, { taskId: 'locked-0' }));
      expect(await store.get('locked-0')).toBeDefined();
    } finally {
      other.close();
      await store.close();
    }
  });

  it('commits the writes asked for before close, then closes', async () => {
    const store = new SqliteTaskStore(path);
    const pending = store.create(newTask(Date.now(), { taskId: 'before-close' }));
    await store.close();
    const { task } = await pending;
    const reopened = new SqliteTaskStore(path);
    try {
      expect(await reopened.get('before-close')).toEqual(task);
    } finally {
      await reopened.close();
    }
  });

  it('runs a group again one write per transaction when one write’s error rolls back the whole transaction', async () => {
    // an error SQLite answers by rolling back the whole transaction (as it may for a full disk or an I/O error), in the
    // middle of a group: the writes before it are undone with it, so each is run again alone, and only the failing
    // one fails (its neighbours must neither be lost with it nor stored while their callers are told they failed)
    const store = new SqliteTaskStore(path);
    const other = openDatabase(path);
    try {
      const now = Date.now();
      const held = (await store.create(newTask(now, { taskId: 'held' }))).task;
      other.exec(`CREATE TRIGGER whole_rollback BEFORE INSERT ON tasks WHEN NEW.task_id = 'rolls-back'
                  BEGIN SELECT RAISE(ROLLBACK, 'the whole transaction rolled back'); END`);
      const outcomes = await Promise.allSettled([
        store.create(newTask(now, { taskId: 'before' })),
        store.create(newTask(now, { taskId: 'rolls-back' })),
        store.create(newTask(now, { taskId: 'after' })),
        store.finish({ taskId: 'held', fence: held.fence }, { status: 'completed', result: { content: [] } }, now),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
      expect(String((outcomes[1] as PromiseRejectedResult).reason)).toMatch(/the whole transaction rolled back/);
      expect((outcomes[3] as PromiseFulfilledResult<boolean>).value).toBe(true);
      // what a second connection reads is what is on the file: each write once, the failed one not at all
      const stored = (taskId: string) => other.prepare('SELECT status FROM tasks WHERE task_id = ?').get(taskId);
      expect([stored('before'), stored('rolls-back'), stored('after')]).toEqual([
        { status: 'working' },
        undefined,
        { status: 'working' },
      ]);
      expect(stored('held')).toEqual({ status: 'completed' });
      expect(other.prepare('SELECT COUNT(*) AS n FROM tasks').get()).toEqual({ n: 3 });
    } finally {
      other.close();
      await store.close();
    }
  });

  it('settles every write asked for while or after the store closes: stored and resolved, or rejected and not stored', async () => {
    const store = new SqliteTaskStore(path);
    const closing = store.close();
    const during = store.create(newTask(Date.now(), { taskId: 'during-close' }));
    await closing;
    const after = store.create(newTask(Date.now(), { taskId: 'after-close' }));
    const [duringOutcome, afterOutcome] = await Promise.allSettled([during, after]);
    expect(afterOutcome.status).toBe('rejected');
    expect(String((afterOutcome as PromiseRejectedResult).reason)).toMatch(/not open/);
    const reopened = new SqliteTaskStore(path);
    try {
      expect(await reopened.get('after-close')).toBeUndefined();
      const stored = await reopened.get('during-close');
      if (duringOutcome.status === 'fulfilled') expect(stored).toEqual(duringOutcome.value.task);
      else expect(stored).toBeUndefined();
    } finally {
      await reopened.close();
    }
  });
});

describe('SqliteTaskStore lease renewal at scale', () => {
  it('renews 12,000 leases in steps, leaving the event loop free between them', async () => {
    // invariant: SQLite runs on the serving thread, so renewing an instance's leases must not hold it for the whole
    // set at once, and each step costs what its leases cost, never a scan per lease (RELIABILITY.md, "What they
    // found" 6)
    const store = new SqliteTaskStore(':memory:');
    try {
      const T0 = 1_700_000_000_000;
      const leases = [];
      for (let i = 0; i < 12_000; i++) {
        const { task } = await store.create({
          taskId: `task-${i}`,
          principal: 'alice',
          toolName: 'slow_echo',
          arguments: {},
          createdAt: T0,
          ttlMs: 600_000,
          pollIntervalMs: 500,
          resumable: true,
          leaseHolder: 'instance-a',
          leaseExpiresAt: T0 + 30_000,
        });
        leases.push({ taskId: task.taskId, fence: task.fence });
      }
      let longestGap = 0;
      let last = performance.now();
      const ticker = setInterval(() => {
        const now = performance.now();
        longestGap = Math.max(longestGap, now - last);
        last = now;
      }, 1);
      const started = performance.now();
      const renewed = await store.renewLeases('instance-a', leases, T0 + 60_000);
      const took = performance.now() - started;
      clearInterval(ticker);
      // the stretch from the last tick to the end of the call counts as well
      longestGap = Math.max(longestGap, performance.now() - last);
      expect(renewed).toHaveLength(12_000);
      expect((await store.get('task-11999'))?.leaseExpiresAt).toBe(T0 + 60_000);
      expect(took).toBeLessThan(10_000);
      expect(longestGap).toBeLessThan(took / 2);
    } finally {
      await store.close();
    }
  });
});
