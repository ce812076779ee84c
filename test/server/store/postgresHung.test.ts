// A hung database must not hang requests (RELIABILITY.md, "What they found" 7): every statement of
// PostgresTaskStore is bounded by `statementTimeoutMs`, on the server (`statement_timeout`: a statement stuck behind
// a lock) and on the client (`query_timeout`: a server that does not answer at all), and a new connection by
// `connectionTimeoutMs`. Each call then fails with an Error, which the runtime answers as -32603
// (test/server/taskServer.test.ts, "storage failure"), and the store works again once the database does. Real faults:
// a lock held by another session, and every process of the embedded PostgreSQL stopped with SIGSTOP.
import { readdirSync, readFileSync } from 'node:fs';

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { PostgresTaskStore } from '../../../src/server/store/postgresTaskStore.js';
import type { NewTask } from '../../../src/server/store/taskStore.js';
import { type StartedPostgres, startPostgres } from '../../support/postgres.js';

const STATEMENT_TIMEOUT_MS = 1000;
const CONNECTION_TIMEOUT_MS = 1500;
/** Far more than either timeout, far less than for ever: a call that outlives this was hung. */
const BOUND_MS = 12_000;

let postgres: StartedPostgres;
let database: { connectionString: string; drop: () => Promise<void> };
let admin: pg.Client;
let store: PostgresTaskStore;
let tasks = 0;

beforeAll(async () => {
  postgres = await startPostgres();
  database = await postgres.createDatabase();
  admin = new pg.Client({ connectionString: database.connectionString });
  await admin.connect();
  store = await PostgresTaskStore.open(database.connectionString, {
    listen: false,
    statementTimeoutMs: STATEMENT_TIMEOUT_MS,
    connectionTimeoutMs: CONNECTION_TIMEOUT_MS,
  });
}, 120_000);

afterAll(async () => {
  await store?.close();
  await admin?.end().catch(() => {});
  await database?.drop();
  await postgres?.stop();
}, 60_000);

function newTask(): NewTask {
  const now = Date.now();
  return {
    taskId: `hung-${++tasks}`,
    principal: 'alice',
    toolName: 'echo',
    arguments: {},
    createdAt: now,
    ttlMs: 60_000,
    pollIntervalMs: 1000,
    resumable: false,
    leaseHolder: 'instance-a',
    leaseExpiresAt: now + 60_000,
  };
}

/** How `call` ended and after how long: it must end, one way or the other, well within BOUND_MS. */
async function timed<T>(call: () => Promise<T>): Promise<{ ms: number; error?: Error; value?: T }> {
  const started = Date.now();
  let bound: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_resolve, reject) => {
    bound = setTimeout(() => reject(new Error(`still waiting after ${BOUND_MS} ms: hung`)), BOUND_MS);
  });
  try {
    const value = await Promise.race([call(), hung]);
    return { ms: Date.now() - started, value };
  } catch (error) {
    if ((error as Error).message.endsWith(': hung')) throw error;
    return { ms: Date.now() - started, error: error as Error };
  } finally {
    clearTimeout(bound);
  }
}

/** The pids of every process of the cluster that serves `admin`: the postmaster and all its children. */
function clusterPids(dataDirectory: string): number[] {
  const postmaster = Number(readFileSync(`${dataDirectory}/postmaster.pid`, 'utf8').split('\n')[0]);
  const children = readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster;
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
  return [postmaster, ...children];
}

describe('PostgresTaskStore against a hung database', { timeout: 90_000 }, () => {
  it('fails a statement stuck behind another session’s lock after statementTimeoutMs, then works again', async () => {
    const { task } = await store.create(newTask());
    await admin.query('BEGIN');
    await admin.query('LOCK TABLE closeout_tasks IN ACCESS EXCLUSIVE MODE');
    try {
      const stuck = await timed(() => store.get(task.taskId));
      expect(stuck.error?.message).toMatch(/^PostgreSQL task store: get failed: .*statement timeout/);
      expect(stuck.ms).toBeGreaterThanOrEqual(STATEMENT_TIMEOUT_MS - 50);
    } finally {
      await admin.query('ROLLBACK');
    }
    expect(await store.get(task.taskId)).toEqual(task);
  });

  it('fails every call while the database does not answer at all, then works again once it does', async () => {
    const { task } = await store.create(newTask());
    const { rows } = await admin.query<{ data_directory: string }>('SHOW data_directory');
    const pids = clusterPids(rows[0]!.data_directory);
    expect(pids.length).toBeGreaterThan(1);
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    try {
      // more calls than the pool has connections: the first ones wait for answers, the rest for connections
      const calls = await Promise.all(Array.from({ length: 12 }, () => timed(() => store.get(task.taskId))));
      for (const call of calls) {
        expect(call.error?.message).toMatch(/^PostgreSQL task store: get failed: /);
      }
      const created = await timed(() => store.create(newTask()));
      expect(created.error?.message).toMatch(/^PostgreSQL task store: create failed: /);
    } finally {
      for (const pid of pids) process.kill(pid, 'SIGCONT');
    }
    // the store recovers on its own: discarded connections are replaced
    let read: unknown;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      read = await store.get(task.taskId).catch((error: unknown) => error);
      if (!(read instanceof Error)) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(read).toEqual(task);
  });
});
