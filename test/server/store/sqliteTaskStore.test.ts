import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import { describeTaskStoreContract } from './contract.js';

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
        owner: 'alice',
        toolName: 'echo',
        arguments: {},
        createdAt: 1,
        ttlMs: null,
        pollIntervalMs: 1000,
        resumable: false,
        leaseOwner: 'instance-a',
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
      owner: 'alice',
      toolName: 'echo',
      arguments: { a: 1 },
      createdAt: 1,
      ttlMs: 1000,
      pollIntervalMs: 1000,
      resumable: true,
      leaseOwner: 'instance-a',
      leaseExpiresAt: 2,
    });
    await first.close();
    const second = new SqliteTaskStore(path);
    expect(await second.get('task-durable')).toEqual(task);
    await second.close();
  });
});
