// The operators' listing (src/server/store/listing) answers alike on both stores: newest first, every filter (an
// idempotency key among them, whoever's task it is, and a search by id prefix or key), a cursor that neither skips nor
// repeats a task, counts per status, a clear refusal of a bad query; and at 100,000 tasks each query shape is planned
// on an index, never a scan of the table (its cost must not grow with the store).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { TaskStatus } from '../../../src/protocol/index.js';
import { postgresCountStatement, postgresListStatement } from '../../../src/server/store/listing/postgres.js';
import type { TaskListQuery, TaskSummary } from '../../../src/server/store/listing/query.js';
import { TaskListQueryError } from '../../../src/server/store/listing/query.js';
import { sqliteCountStatement, sqliteListStatement, sqlitePlan } from '../../../src/server/store/listing/sqlite.js';
import { PostgresTaskStore } from '../../../src/server/store/postgresTaskStore.js';
import { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import type { NewTask, TaskStore } from '../../../src/server/store/taskStore.js';
import { openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';
import { newTask } from '../../support/newTask.js';
import { type StartedPostgres, startPostgres } from '../../support/postgres.js';

const T0 = 1_700_000_000_000;

let postgres: StartedPostgres;
beforeAll(async () => {
  postgres = await startPostgres();
});
afterAll(async () => {
  await postgres?.stop();
});

interface Fixture {
  store: TaskStore;
  cleanup: () => Promise<void>;
}

const STORES: Array<[string, () => Promise<Fixture>]> = [
  [
    'SqliteTaskStore',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'closeout-listing-'));
      const store = new SqliteTaskStore(join(dir, 'tasks.db'));
      return {
        store,
        cleanup: async () => {
          await store.close();
          await rm(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'PostgresTaskStore',
    async () => {
      const database = await postgres.createDatabase();
      const store = await PostgresTaskStore.open(database.connectionString);
      return {
        store,
        cleanup: async () => {
          await store.close();
          await database.drop();
        },
      };
    },
  ],
];

describe.each(STORES)('the operators’ listing on %s', (_name, open) => {
  let fixture: Fixture;
  let store: TaskStore;
  beforeEach(async () => {
    fixture = await open();
    store = fixture.store;
  });
  afterEach(async () => {
    await fixture.cleanup();
  });

  const list = (query: TaskListQuery = {}) => store.listTasks!(query);
  const ids = (tasks: TaskSummary[]) => tasks.map((task) => task.taskId);

  async function seed(tasks: Array<Partial<NewTask>>): Promise<void> {
    for (const task of tasks) await store.create(newTask(task.createdAt ?? T0, task));
  }

  /** Every task the query selects, page by page, checking no page is longer than the limit. */
  async function allPages(query: TaskListQuery): Promise<{ ids: string[]; pages: number }> {
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await list({ ...query, cursor });
      expect(page.tasks.length).toBeLessThanOrEqual(query.limit ?? 50);
      seen.push(...ids(page.tasks));
      cursor = page.nextCursor;
      pages++;
      expect(pages).toBeLessThan(100);
    } while (cursor !== undefined);
    return { ids: seen, pages };
  }

  it('lists nothing and counts zeros on an empty store', async () => {
    expect(await list()).toEqual({ tasks: [], nextCursor: undefined });
    expect(await store.countTasks!()).toEqual({
      working: 0,
      input_required: 0,
      completed: 0,
      failed: 0,
      cancelled: 0,
    });
  });

  it('lists newest first, ties by task id, a page at a time with a cursor that skips and repeats nothing', async () => {
    // three tasks share a creation time: the task id orders them, so no page boundary can split them ambiguously
    await seed([
      { taskId: 'a', createdAt: T0 + 1 },
      { taskId: 'b', createdAt: T0 + 3 },
      { taskId: 'c', createdAt: T0 + 3 },
      { taskId: 'd', createdAt: T0 + 3 },
      { taskId: 'e', createdAt: T0 + 2 },
      { taskId: 'f', createdAt: T0 + 5 },
      { taskId: 'g', createdAt: T0 },
    ]);
    const expected = ['f', 'd', 'c', 'b', 'e', 'a', 'g'];
    expect(ids((await list()).tasks)).toEqual(expected);
    for (const limit of [1, 2, 3, 7]) {
      const { ids: seen, pages } = await allPages({ limit });
      expect(seen).toEqual(expected);
      expect(pages).toBe(Math.ceil(expected.length / limit));
    }
    const first = await list({ limit: 7 });
    expect(first.nextCursor).toBeUndefined();
  });

  it('shows each task’s summary as the store holds it, without arguments or result', async () => {
    const { task } = await store.create(
      newTask(T0, { taskId: 'done', principal: 'bob', toolName: 'report', statusMessage: 'starting' }),
    );
    await store.finish(
      { taskId: task.taskId, fence: task.fence },
      { status: 'completed', result: { content: [] }, statusMessage: 'all done' },
      T0 + 250,
    );
    const { task: open } = await store.create(newTask(T0 + 1, { taskId: 'open', ttlMs: null }));
    await store.requestCancel(open.taskId, T0 + 300);
    const { tasks } = await list();
    expect(tasks).toEqual([
      {
        taskId: 'open',
        principal: 'alice',
        toolName: 'job',
        status: 'working',
        statusMessage: undefined,
        createdAt: T0 + 1,
        lastUpdatedAt: T0 + 300,
        ttlMs: null,
        attempt: 1,
        cancelRequested: true,
        leaseHolder: 'instance-a',
        leaseExpiresAt: T0 + 1 + 60_000,
      },
      {
        taskId: 'done',
        principal: 'bob',
        toolName: 'report',
        status: 'completed',
        statusMessage: 'all done',
        createdAt: T0,
        lastUpdatedAt: T0 + 250,
        ttlMs: 600_000,
        attempt: 1,
        cancelRequested: false,
        leaseHolder: undefined,
        leaseExpiresAt: undefined,
      },
    ]);
  });

  describe('filters', () => {
    beforeEach(async () => {
      const specs: Array<[string, string, string, TaskStatus]> = [
        ['t01', 'alice', 'build', 'working'],
        ['t02', 'alice', 'build', 'completed'],
        ['t03', 'bob', 'build', 'failed'],
        ['t04', 'bob', 'deploy', 'completed'],
        ['t05', 'alice', 'deploy', 'cancelled'],
        ['t06', 'carol', 'build', 'input_required'],
        ['t07', 'bob', 'build', 'completed'],
        ['t08', 'alice', 'deploy', 'working'],
      ];
      for (const [i, [taskId, principal, toolName, status]] of specs.entries()) {
        const { task } = await store.create(newTask(T0 + i * 1000, { taskId, principal, toolName }));
        const lease = { taskId, fence: task.fence };
        if (status === 'completed') await store.finish(lease, { status, result: { content: [] } }, T0 + 10_000);
        if (status === 'failed') {
          await store.finish(lease, { status, error: { code: -32603, message: 'boom' } }, T0 + 10_000);
        }
        if (status === 'cancelled') await store.finish(lease, { status }, T0 + 10_000);
        if (status === 'input_required') {
          const request = { method: 'elicitation/create', params: { message: 'ok?', requestedSchema: {} } } as const;
          await store.requestInput(lease, 'k', request as never, T0 + 10_000);
        }
      }
    });

    it('select by status, several statuses, tool, principal, creation time, and all of them together', async () => {
      expect(ids((await list({ status: 'completed' })).tasks)).toEqual(['t07', 't04', 't02']);
      expect(ids((await list({ status: ['working', 'failed'] })).tasks)).toEqual(['t08', 't03', 't01']);
      expect(ids((await list({ status: ['input_required'] })).tasks)).toEqual(['t06']);
      expect(ids((await list({ toolName: 'deploy' })).tasks)).toEqual(['t08', 't05', 't04']);
      expect(ids((await list({ principal: 'bob' })).tasks)).toEqual(['t07', 't04', 't03']);
      // from inclusive, before exclusive
      expect(ids((await list({ createdFrom: T0 + 2000, createdBefore: T0 + 5000 })).tasks)).toEqual([
        't05',
        't04',
        't03',
      ]);
      expect(
        ids((await list({ principal: 'alice', toolName: 'build', status: ['working', 'completed'] })).tasks),
      ).toEqual(['t02', 't01']);
      expect(ids((await list({ principal: 'nobody' })).tasks)).toEqual([]);
      expect(ids((await list({ toolName: 'build', createdFrom: T0 + 6000 })).tasks)).toEqual(['t07']);
    });

    it('page through a filtered listing with the same cursor rules', async () => {
      expect((await allPages({ principal: 'alice', limit: 1 })).ids).toEqual(['t08', 't05', 't02', 't01']);
      expect((await allPages({ status: ['completed', 'working'], limit: 2 })).ids).toEqual([
        't08',
        't07',
        't04',
        't02',
        't01',
      ]);
      expect((await allPages({ createdBefore: T0 + 7000, limit: 3 })).ids).toEqual([
        't07',
        't06',
        't05',
        't04',
        't03',
        't02',
        't01',
      ]);
    });

    it('count each status for the same filters', async () => {
      expect(await store.countTasks!()).toEqual({
        working: 2,
        input_required: 1,
        completed: 3,
        failed: 1,
        cancelled: 1,
      });
      expect(await store.countTasks!({ principal: 'alice' })).toEqual({
        working: 2,
        input_required: 0,
        completed: 1,
        failed: 0,
        cancelled: 1,
      });
      expect(await store.countTasks!({ toolName: 'build', status: ['completed', 'failed'] })).toEqual({
        working: 0,
        input_required: 0,
        completed: 2,
        failed: 1,
        cancelled: 0,
      });
      // a cursor and a limit do not narrow a count
      const { nextCursor } = await list({ limit: 1 });
      expect(await store.countTasks!({ createdFrom: T0 + 4000, cursor: nextCursor, limit: 1 })).toEqual({
        working: 1,
        input_required: 1,
        completed: 1,
        failed: 0,
        cancelled: 1,
      });
    });
  });

  it('select by task id prefix, case-sensitive, with no character of the prefix taken as a pattern', async () => {
    // base64url ids hold '_' and '-': a LIKE pattern would take '_' for any character
    const taskIds = ['ab_1', 'ab-2', 'abc', 'Ab3', 'aB4', 'a%b', 'ax_b', 'ab', 'b', 'ab\u{10FFFF}z', 'ac'];
    await seed(taskIds.map((taskId, i) => ({ taskId, createdAt: T0 + i })));
    const prefixed = async (taskIdPrefix: string) => ids((await list({ taskIdPrefix, limit: 100 })).tasks).sort();
    expect(await prefixed('ab')).toEqual(['ab', 'ab-2', 'ab_1', 'abc', 'ab\u{10FFFF}z'].sort());
    expect(await prefixed('ab_')).toEqual(['ab_1']);
    expect(await prefixed('a%')).toEqual(['a%b']);
    expect(await prefixed('A')).toEqual(['Ab3']);
    expect(await prefixed('ab\u{10FFFF}')).toEqual(['ab\u{10FFFF}z']);
    expect(await prefixed('abc')).toEqual(['abc']);
    expect(await prefixed('abcd')).toEqual([]);
    // an empty prefix selects everything
    expect(await prefixed('')).toHaveLength(taskIds.length);
    expect(await store.countTasks!({ taskIdPrefix: 'ab' })).toMatchObject({ working: 5 });
  });

  it('select by idempotency key, whoever’s task it is, and search by task id prefix or key', async () => {
    // a key is the caller's own and unique per principal only: alice and bob may both use `order-7`
    await seed([
      { taskId: 'k1', principal: 'alice', idempotencyKey: 'order-7', createdAt: T0 },
      { taskId: 'k2', principal: 'bob', idempotencyKey: 'order-7', createdAt: T0 + 1 },
      { taskId: 'k3', principal: 'alice', idempotencyKey: 'order-70', createdAt: T0 + 2 },
      { taskId: 'order-7x', principal: 'carol', createdAt: T0 + 3 },
      { taskId: 'plain', principal: 'carol', createdAt: T0 + 4 },
    ]);
    // exact, never a prefix of the key
    expect(ids((await list({ idempotencyKey: 'order-7' })).tasks)).toEqual(['k2', 'k1']);
    expect(ids((await list({ idempotencyKey: 'order-7', principal: 'bob' })).tasks)).toEqual(['k2']);
    expect(ids((await list({ idempotencyKey: 'order' })).tasks)).toEqual([]);
    expect(ids((await list({ idempotencyKey: 'order-7', limit: 1 })).tasks)).toEqual(['k2']);
    expect(await store.countTasks!({ idempotencyKey: 'order-7' })).toMatchObject({ working: 2 });
    // a search box: the id prefix or the exact key, either one
    expect(ids((await list({ search: 'order-7' })).tasks)).toEqual(['order-7x', 'k2', 'k1']);
    expect(ids((await list({ search: 'k' })).tasks)).toEqual(['k3', 'k2', 'k1']);
    expect(ids((await list({ search: 'order-70' })).tasks)).toEqual(['k3']);
    expect(ids((await list({ search: 'pl', status: 'completed' })).tasks)).toEqual([]);
    expect(await store.countTasks!({ search: 'order-7' })).toMatchObject({ working: 3 });
    expect((await allPages({ search: 'order-7', limit: 1 })).ids).toEqual(['order-7x', 'k2', 'k1']);
  });

  it('refuses a bad query with an error naming what is wrong, and the store goes on answering', async () => {
    await seed([{ taskId: 'kept' }]);
    const refusals: Array<[TaskListQuery, RegExp]> = [
      [{ status: 'done' as TaskStatus }, /unknown status "done"/],
      [{ status: [] }, /non-empty list/],
      [{ limit: 0 }, /limit must be an integer from 1 to 1000/],
      [{ limit: 1001 }, /limit must be an integer from 1 to 1000/],
      [{ limit: 2.5 }, /limit must be an integer/],
      [{ cursor: 'not a cursor' }, /cursor is not one a listing returned/],
      [{ cursor: Buffer.from('["x","y"]').toString('base64url') }, /cursor is not one a listing returned/],
      [{ cursor: Buffer.from('{').toString('base64url') }, /cursor is not one a listing returned/],
      [{ toolName: 'a\0b' }, /toolName must be well-formed Unicode text without NUL characters/],
      [{ principal: 'x\uD800' }, /principal must be well-formed Unicode text .* lone surrogate/],
      [{ idempotencyKey: 'k\0' }, /idempotencyKey must be well-formed Unicode text without NUL characters/],
      [{ search: 'x\uDC00' }, /search must be well-formed Unicode text .* lone surrogate/],
      [{ createdFrom: Number.NaN }, /createdFrom must be a time in ms/],
    ];
    for (const [query, message] of refusals) {
      await expect(list(query)).rejects.toThrow(TaskListQueryError);
      await expect(list(query)).rejects.toThrow(message);
    }
    await expect(store.countTasks!({ status: 'nope' as TaskStatus })).rejects.toThrow(TaskListQueryError);
    expect(ids((await list()).tasks)).toEqual(['kept']);
    expect((await store.get('kept'))?.status).toBe('working');
  });
});

/** Every query shape the listing has, each filter alone and together, with and without a cursor. */
function queryShapes(cursor: string): TaskListQuery[] {
  const shapes: TaskListQuery[] = [
    {},
    { status: 'completed' },
    { status: ['working', 'failed'] },
    { toolName: 'tool-7' },
    { principal: 'principal-3' },
    { taskIdPrefix: 'task-0001' },
    { idempotencyKey: 'key-000124' },
    { idempotencyKey: 'key-000124', status: 'input_required', principal: 'principal-24' },
    { search: 'task-0001' },
    { search: 'key-000124', status: ['working', 'failed'] },
    { createdFrom: T0 + 10_000, createdBefore: T0 + 20_000 },
    { principal: 'principal-3', status: 'failed', toolName: 'tool-7' },
    { toolName: 'tool-7', status: ['working', 'completed'], createdFrom: T0 },
  ];
  return [...shapes, ...shapes.map((shape) => ({ ...shape, cursor }))];
}

/** Whether a count of `query` counts every task of its statuses (no filter but status: a cursor does not narrow it). */
function countsEveryTask(query: TaskListQuery): boolean {
  return Object.keys(query).every((key) => key === 'status' || key === 'cursor');
}

/** Whether the query has a filter with an index of its own (not status, not creation time alone). */
function isNarrowed(query: TaskListQuery): boolean {
  return (['principal', 'toolName', 'taskIdPrefix', 'idempotencyKey', 'search'] as const).some(
    (key) => query[key] !== undefined,
  );
}

/** 100,000 tasks over 5 statuses, 20 tools and 50 principals, written in one statement (`i` is 0 to 99,999). */
const BULK_ROWS = 100_000;

describe('the listing at 100,000 tasks', () => {
  it('plans every query shape on an index on SQLite (EXPLAIN QUERY PLAN), and lists the newest', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'closeout-listing-plan-'));
    const path = join(dir, 'tasks.db');
    const store = new SqliteTaskStore(path);
    const db = openDatabase(path);
    try {
      // written in SQL rather than through create: 100,000 creates would make the test slow, not the listing
      db.exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${BULK_ROWS - 1})
        INSERT INTO tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
          expires_at, poll_interval_ms, resumable, idempotency_key)
        SELECT printf('task-%06d', i), 'principal-' || (i % 50), 'tool-' || (i % 20),
          '{}', CASE i % 5 WHEN 0 THEN 'working' WHEN 1 THEN 'input_required' WHEN 2 THEN 'completed'
            WHEN 3 THEN 'failed' ELSE 'cancelled' END,
          ${T0} + i * 10, ${T0} + i * 10, NULL, NULL, 1000, 0,
          CASE WHEN i % 2 = 0 THEN printf('key-%06d', i) END FROM n`);
      const first = await store.listTasks({ limit: 3 });
      expect(first.tasks.map((task) => task.taskId)).toEqual(['task-099999', 'task-099998', 'task-099997']);
      expect(await store.countTasks()).toEqual({
        working: 20_000,
        input_required: 20_000,
        completed: 20_000,
        failed: 20_000,
        cancelled: 20_000,
      });
      expect((await store.listTasks({ taskIdPrefix: 'task-0001', limit: 1000 })).tasks).toHaveLength(100);
      expect((await store.listTasks({ idempotencyKey: 'key-000124' })).tasks.map((task) => task.taskId)).toEqual([
        'task-000124',
      ]);
      for (const query of queryShapes(first.nextCursor!)) {
        for (const [what, statement] of [
          ['list', sqliteListStatement(query)],
          ['count', sqliteCountStatement(query)],
        ] as const) {
          const plan = sqlitePlan(db, statement);
          const reads = plan.filter((line) => /\btasks\b/.test(line));
          expect(reads.length, `${JSON.stringify(query)}: ${plan.join(' | ')}`).toBeGreaterThan(0);
          // counting every task of some statuses reads them all, once, from the status index alone
          if (what === 'count' && countsEveryTask(query)) {
            expect(reads, `${JSON.stringify(query)}: ${plan.join(' | ')}`).toHaveLength(1);
            expect(reads[0]).toMatch(/^(SCAN|SEARCH) tasks USING COVERING INDEX tasks_listing_status/);
            continue;
          }
          // SEARCH: a range of an index; SCAN would read every task (or every entry of an index)
          for (const line of reads) {
            expect(line, `${JSON.stringify(query)}: ${plan.join(' | ')}`).toMatch(/^SEARCH tasks USING .*INDEX/);
            // narrowed, never a whole status's slice of its index (20,000 tasks here) before the narrower filter
            if (isNarrowed(query)) expect(line, `${JSON.stringify(query)}`).not.toMatch(/tasks_listing_status/);
          }
        }
      }
    } finally {
      db.close();
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('plans every query shape on an index on PostgreSQL (EXPLAIN), and lists the newest', async () => {
    const database = await postgres.createDatabase();
    const store = await PostgresTaskStore.open(database.connectionString);
    const client = new pg.Client({ connectionString: database.connectionString });
    await client.connect();
    try {
      await client.query(`INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at,
          last_updated_at, poll_interval_ms, resumable, idempotency_key)
        SELECT 'task-' || lpad(i::text, 6, '0'), 'principal-' || (i % 50), 'tool-' || (i % 20), '{}',
          (ARRAY['working','input_required','completed','failed','cancelled'])[i % 5 + 1],
          ${T0} + i * 10, ${T0} + i * 10, 1000, false,
          CASE WHEN i % 2 = 0 THEN 'key-' || lpad(i::text, 6, '0') END
        FROM generate_series(0, ${BULK_ROWS - 1}) AS i`);
      // the statistics and visibility map autovacuum keeps on a live database
      await client.query('VACUUM ANALYZE closeout_tasks');
      const first = await store.listTasks({ limit: 3 });
      expect(first.tasks.map((task) => task.taskId)).toEqual(['task-099999', 'task-099998', 'task-099997']);
      // i % 50 = 3 means i % 5 = 3: every task of principal-3 failed
      expect(await store.countTasks({ principal: 'principal-3' })).toEqual({
        working: 0,
        input_required: 0,
        completed: 0,
        failed: 2000,
        cancelled: 0,
      });
      expect((await store.listTasks({ taskIdPrefix: 'task-0001', limit: 1000 })).tasks).toHaveLength(100);
      expect((await store.listTasks({ search: 'key-000124' })).tasks.map((task) => task.taskId)).toEqual([
        'task-000124',
      ]);
      const unindexed: string[] = [];
      for (const query of queryShapes(first.nextCursor!)) {
        for (const [what, statement] of [
          ['list', postgresListStatement(query)],
          ['count', postgresCountStatement(query)],
        ] as const) {
          const { rows } = await client.query<{ 'QUERY PLAN': unknown }>(
            `EXPLAIN (FORMAT JSON) ${statement.text}`,
            statement.values,
          );
          const scans = planNodes(rows[0]!['QUERY PLAN']).filter((node) => node['Relation Name'] === 'closeout_tasks');
          const kinds = scans.map((node) => node['Node Type'] as string);
          // counting every task of some statuses reads them all, once: the planner picks how
          if (what === 'count' && countsEveryTask(query)) {
            if (kinds.length !== 1) unindexed.push(`${what} ${JSON.stringify(query)}: ${kinds.join(', ')}`);
            continue;
          }
          if (kinds.length === 0 || kinds.some((kind) => !INDEX_SCANS.includes(kind))) {
            unindexed.push(`${what} ${JSON.stringify(query)}: ${kinds.join(', ')}`);
          }
        }
      }
      expect(unindexed).toEqual([]);
    } finally {
      await client.end();
      await store.close();
      await database.drop();
    }
  });
});

/** The plan nodes that read a table through an index (a range of it, or the rows it points to). */
const INDEX_SCANS = ['Index Scan', 'Index Only Scan', 'Bitmap Heap Scan'];

/** Every node of an EXPLAIN (FORMAT JSON) plan. */
function planNodes(explained: unknown): Array<Record<string, unknown>> {
  const nodes: Array<Record<string, unknown>> = [];
  const visit = (node: Record<string, unknown>) => {
    nodes.push(node);
    for (const child of (node['Plans'] as Array<Record<string, unknown>> | undefined) ?? []) visit(child);
  };
  for (const root of explained as Array<{ Plan: Record<string, unknown> }>) visit(root.Plan);
  return nodes;
}
