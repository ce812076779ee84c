/**
 * Benchmark 13 (bench/RESULTS.md section 13): task creation on PostgreSQL against SQLite, in one process, straight
 * through the stores (no HTTP, no SDK: the store's work is what is measured). `--concurrency` workers each create a
 * task and finish it, over and over, with the server's default per-principal limits set (maxOpenTasksPerPrincipal 1000,
 * and a stored limit above what the run stores), so every create checks both. Scenarios, rotated each round:
 *
 * - `sqlite`: SqliteTaskStore, its default `synchronous=FULL`; `sqlite.normal`: `synchronous=NORMAL`
 * - `pg.1`: PostgresTaskStore, every worker the same principal (a server without auth)
 * - `pg.16`: PostgresTaskStore, each worker a principal of its own
 * - `pg.1@100k`: `pg.1` on a database already holding `--rows` finished tasks of that same principal
 * - `sqlite@100k`: `sqlite` on a file already holding `--rows` finished tasks of that same principal (the per-principal
 *   limits must not count them at every create)
 * - `pg.floor`: no PostgresTaskStore, only what any durable PostgreSQL task store must do (insert the task's row, then
 *   update it to completed, batched per turn as the store batches): the floor, measured in the same run, that issue
 *   19's "or the results say why one cannot" needs (`openFloor`)
 * - `pg.1.durable`, `pg.floor.durable`: `pg.1` and `pg.floor` on a second cluster that syncs every commit, as a
 *   production one does and as `sqlite` does (`fsync`, `synchronous_commit` and `full_page_writes` on, PostgreSQL's
 *   defaults); the first cluster, like the tests', runs with the three off, so `pg.1 / sqlite` compares a database that
 *   flushes nothing with one that flushes every commit
 *
 * Where a PostgreSQL task's time goes, per scenario: the cluster's CPU (from /proc), the time its statements spend
 * executing (`pg_stat_statements`, loaded in both clusters: the part of the store's work its statements' form decides,
 * against the floor's, bench/RESULTS.md section 36) and the WAL it writes.
 *
 * Round trips are counted, not inferred: every `pg.Client#query` of this process is counted (a query is one round
 * trip: node-postgres sends parse, bind, execute and sync in one flight; BEGIN and COMMIT are queries too), over
 * `--sequential` creates, gets and finishes done one at a time.
 *
 *   node dist/bench/bench/postgresCreate.js [--smoke] [--tasks 4000] [--concurrency 16] [--rounds 5] [--rows 100000]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import Database from 'better-sqlite3';
import {
  type LeaseRef,
  type NewTask,
  PostgresTaskStore,
  SqliteTaskStore,
  type TaskStore,
  type TerminalOutcome,
} from 'closeout/server';
import DataLoader from 'dataloader';
import pg from 'pg';

import { startPostgres } from '../test/support/postgres.js';
import { fixed, machineLine, median, percentile, table } from './figures.js';
import { positive } from './flags.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    concurrency: { type: 'string' },
    rounds: { type: 'string' },
    rows: { type: 'string' },
    sequential: { type: 'string' },
  },
});
const TASKS = positive(flags.tasks, flags.smoke ? 64 : 4000);
const CONCURRENCY = positive(flags.concurrency, flags.smoke ? 4 : 16);
const ROUNDS = positive(flags.rounds, flags.smoke ? 1 : 5);
const ROWS = positive(flags.rows, flags.smoke ? 1000 : 100_000);
const SEQUENTIAL = positive(flags.sequential, flags.smoke ? 20 : 200);
/** The server's default open limit (src/server/limits.ts); the stored limit sits above everything the run stores. */
const LIMITS = { maxOpenTasksForPrincipal: 1000, maxStoredTasksForPrincipal: 10 * (ROWS + TASKS * ROUNDS) };
/** No scenario may take longer than this, whatever the machine. */
const DEADLINE_MS = 300_000;

/** Every query any pg.Client of this process sends (pools hand out pg.Client instances). */
let queries = 0;
const clientQuery = pg.Client.prototype.query;
pg.Client.prototype.query = function countedQuery(this: pg.Client, ...args: unknown[]) {
  queries++;
  return (clientQuery as (...a: unknown[]) => unknown).apply(this, args);
} as typeof pg.Client.prototype.query;

function newTask(principal: string, now: number): NewTask {
  return {
    taskId: `task-${randomUUID()}`,
    principal,
    toolName: 'bench',
    arguments: { n: 1 },
    createdAt: now,
    ttlMs: 3_600_000,
    pollIntervalMs: 1000,
    resumable: false,
    leaseHolder: 'bench-instance',
    leaseExpiresAt: now + 60_000,
    ...LIMITS,
  };
}

interface Figures {
  tasksPerSecond: number;
  createP50: number;
  createP99: number;
  /** Where a task's time went: wall clock, this process's CPU, the PostgreSQL cluster's CPU (µs per task). */
  wallUs: number;
  nodeCpuUs: number;
  postgresCpuUs: number | undefined;
  /** The WAL the cluster wrote, bytes per task (what a syncing cluster flushes). */
  walBytes: number | undefined;
  /** The time the cluster's statements spent executing, µs per task (`Cluster.execMs`). */
  execUs: number | undefined;
}

/**
 * A PostgreSQL cluster as `run` measures it: its postmaster's processes' CPU, the WAL it writes and the time its
 * statements spend executing.
 */
interface Cluster {
  /** undefined where there is no /proc: CPU not measured */
  postmaster: number | undefined;
  /** The WAL written so far (`pg_current_wal_lsn`, cluster-wide), in bytes. */
  walBytes(): Promise<number>;
  /**
   * The time every top-level statement of the cluster has spent executing so far, in ms (`pg_stat_statements`'
   * `total_exec_time`, summed over its databases): parse, bind and the commit's flush are not in it, a trigger's work
   * is in the statement that fired it.
   */
  execMs(): Promise<number>;
  close(): Promise<void>;
}

async function clusterOf(connectionString: string): Promise<Cluster> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  // the view of the library the cluster loads (startPostgres's `statementStats`), in this database
  await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  let postmaster: number | undefined;
  try {
    // the backend's parent is the postmaster (where /proc exists: Linux)
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const stat = readFileSync(`/proc/${rows[0]!.pid}/stat`, 'utf8');
    postmaster = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    postmaster = undefined;
  }
  return {
    postmaster,
    walBytes: async () => {
      const { rows } = await client.query<{ lsn: string }>(`SELECT pg_current_wal_lsn() - '0/0' AS lsn`);
      return Number(rows[0]!.lsn);
    },
    execMs: async () => {
      const { rows } = await client.query<{ ms: number }>(
        'SELECT COALESCE(SUM(total_exec_time), 0)::float8 AS ms FROM pg_stat_statements',
      );
      return rows[0]!.ms;
    },
    close: () => client.end(),
  };
}

/**
 * CPU time (user + system, ms) of `postmaster` and of every process it started (backends, WAL writer, autovacuum),
 * from Linux's /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s); undefined where there is no /proc.
 */
function postgresCpuMs(postmaster: number | undefined): number | undefined {
  if (postmaster === undefined) return undefined;
  let ticks = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // after "pid (comm) ": state, ppid, ... utime is the 12th field from there, stime the 13th
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(entry) === postmaster || Number(fields[1]) === postmaster)
      ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks * 10;
}

/** What `run` calls: a TaskStore's create and finish, or the floor's (`openFloor`), which is no TaskStore. */
interface CreatesAndFinishes {
  create(task: NewTask): Promise<{ task: LeaseRef }>;
  finish(lease: LeaseRef, outcome: TerminalOutcome, now: number): Promise<unknown>;
}

/**
 * `TASKS` create-then-finish cycles over `CONCURRENCY` workers; worker i creates as `principalOf(i)`. `cluster`: the
 * PostgreSQL cluster whose CPU and WAL the figures take (none for SQLite).
 */
async function run(
  store: CreatesAndFinishes,
  principalOf: (worker: number) => string,
  tasks = TASKS,
  cluster?: Cluster,
): Promise<Figures> {
  const walBefore = await cluster?.walBytes();
  const execBefore = await cluster?.execMs();
  const createMs: number[] = [];
  let next = 0;
  const cpuBefore = process.cpuUsage();
  const postgresBefore = postgresCpuMs(cluster?.postmaster);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, worker) => {
      while (next < tasks) {
        next++;
        if (performance.now() - started > DEADLINE_MS) throw new Error(`over the ${DEADLINE_MS} ms deadline`);
        const now = Date.now();
        const t0 = performance.now();
        const { task } = await store.create(newTask(principalOf(worker), now));
        createMs.push(performance.now() - t0);
        await store.finish({ taskId: task.taskId, fence: task.fence }, { status: 'completed', result: {} }, now + 1);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const postgresAfter = postgresCpuMs(cluster?.postmaster);
  const walAfter = await cluster?.walBytes();
  const execAfter = await cluster?.execMs();
  createMs.sort((a, b) => a - b);
  return {
    tasksPerSecond: tasks / seconds,
    createP50: percentile(createMs, 50),
    createP99: percentile(createMs, 99),
    wallUs: (seconds * 1e6) / tasks,
    nodeCpuUs: (cpu.user + cpu.system) / tasks,
    postgresCpuUs:
      postgresBefore === undefined || postgresAfter === undefined
        ? undefined
        : ((postgresAfter - postgresBefore) * 1000) / tasks,
    walBytes: walBefore === undefined || walAfter === undefined ? undefined : (walAfter - walBefore) / tasks,
    execUs: execBefore === undefined || execAfter === undefined ? undefined : ((execAfter - execBefore) * 1000) / tasks,
  };
}

/**
 * `pg.floor`: what any durable PostgreSQL task store costs in this harness at the least, so that `pg.1` can be read
 * against it. Each create inserts the task's row (what `newTask` carries, JSON as jsonb), each finish updates it to
 * its outcome with its result, committed before the promise resolves (autocommit: each statement is its own
 * transaction), into a table with a primary key and nothing else: no other index, no trigger, no limits counted,
 * nothing read back. Batched as the store batches (its `batches`, bench/RESULTS.md sections 16 and 34), since a
 * statement per call is what batching removed: the creates asked for in one turn of the event loop go as one prepared
 * statement reading one JSON parameter (two at once from 16 creates on), the finishes likewise, over a pool of as many
 * connections as the store's.
 */
async function openFloor(connectionString: string) {
  const pool = new pg.Pool({ connectionString, max: CONCURRENCY });
  await pool.query(
    `CREATE TABLE floor_tasks (
       task_id text PRIMARY KEY, owner text NOT NULL, tool_name text NOT NULL, arguments jsonb NOT NULL,
       status text NOT NULL, created_at bigint NOT NULL, ttl_ms bigint, expires_at bigint,
       poll_interval_ms bigint NOT NULL, lease_owner text, lease_expires_at bigint, result jsonb
     )`,
  );
  // the store's batching (its `batches`): the calls of one turn (setImmediate), at most 256 (its MAX_BATCH), as one
  // statement, or from 16 on (its PIPELINE_CALLS) as two at once, each half answered when its statement commits
  const halves = <K>(batch: readonly K[]) =>
    batch.length < 16
      ? [batch]
      : [batch.slice(0, Math.ceil(batch.length / 2)), batch.slice(Math.ceil(batch.length / 2))];
  const batches = <K>(send: (batch: readonly K[]) => Promise<unknown>) => {
    const loader = new DataLoader<K, Promise<true>>(
      async (batch) =>
        halves(batch).flatMap((calls) => {
          const sent = send(calls).then(() => true as const);
          sent.catch(() => {});
          return calls.map(() => sent);
        }),
      { cache: false, maxBatchSize: 256, batchScheduleFn: (next) => setImmediate(next) },
    );
    return { load: async (call: K) => await loader.load(call) };
  };
  const creates = batches<NewTask>((batch) =>
    pool.query({
      name: 'floor_create',
      text: `INSERT INTO floor_tasks (task_id, owner, tool_name, arguments, status, created_at, ttl_ms, expires_at,
               poll_interval_ms, lease_owner, lease_expires_at)
             SELECT task_id, owner, tool_name, arguments, 'working', created_at, ttl_ms, expires_at, poll_interval_ms,
               lease_owner, lease_expires_at
             FROM json_to_recordset($1::json) AS b (task_id text, owner text, tool_name text, arguments jsonb,
               created_at bigint, ttl_ms bigint, expires_at bigint, poll_interval_ms bigint, lease_owner text,
               lease_expires_at bigint)`,
      values: [
        JSON.stringify(
          batch.map((task) => ({
            task_id: task.taskId,
            owner: task.principal,
            tool_name: task.toolName,
            arguments: task.arguments,
            created_at: task.createdAt,
            ttl_ms: task.ttlMs,
            expires_at: task.ttlMs === null ? null : task.createdAt + task.ttlMs,
            poll_interval_ms: task.pollIntervalMs,
            lease_owner: task.leaseHolder,
            lease_expires_at: task.leaseExpiresAt,
          })),
        ),
      ],
    }),
  );
  // each task found by a primary key probe of its own (LATERAL, as the store's finishBatch): a plain join is planned
  // as a sequential scan of the table hashed against the batch at any size this run reaches (json_to_recordset is
  // taken for 100 rows), which would make the floor slower than it is
  const finishes = batches<{ taskId: string; outcome: TerminalOutcome }>((batch) =>
    pool.query({
      name: 'floor_finish',
      text: `WITH b AS (SELECT * FROM json_to_recordset($1::json) AS b (task_id text, status text, result jsonb))
             UPDATE floor_tasks t SET status = b.status, result = b.result
             FROM b CROSS JOIN LATERAL (SELECT ctid AS found FROM floor_tasks WHERE task_id = b.task_id OFFSET 0) f
             WHERE t.ctid = f.found`,
      values: [
        JSON.stringify(
          batch.map(({ taskId, outcome }) => ({
            task_id: taskId,
            status: outcome.status,
            result: outcome.status === 'completed' ? outcome.result : null,
          })),
        ),
      ],
    }),
  );
  return {
    create: async (task: NewTask) => {
      await creates.load(task);
      return { task: { taskId: task.taskId, fence: 1 } };
    },
    finish: (lease: LeaseRef, outcome: TerminalOutcome) => finishes.load({ taskId: lease.taskId, outcome }),
    close: () => pool.end(),
  } satisfies CreatesAndFinishes & { close: () => Promise<void> };
}

/** Round trips per create, get and finish, one call at a time on an otherwise idle store. */
async function roundTrips(store: TaskStore) {
  const per = async (what: (i: number) => Promise<unknown>) => {
    const before = queries;
    for (let i = 0; i < SEQUENTIAL; i++) await what(i);
    return (queries - before) / SEQUENTIAL;
  };
  const tasks: { taskId: string; fence: number }[] = [];
  const create = await per(async () => {
    tasks.push((await store.create(newTask('round-trips', Date.now()))).task);
  });
  const get = await per((i) => store.get(tasks[i]!.taskId));
  const finish = await per((i) =>
    store.finish({ taskId: tasks[i]!.taskId, fence: tasks[i]!.fence }, { status: 'completed', result: {} }, Date.now()),
  );
  return { create, get, finish };
}

console.log(`postgresCreate · ${machineLine()}`);
console.log(
  `${TASKS} create+finish per scenario, ${CONCURRENCY} workers, ${ROUNDS} rounds (medians); pg.1@${ROWS} holds ${ROWS} finished tasks of its principal\n`,
);

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-pgcreate-'));
const postgres = await startPostgres({ statementStats: true });
const durablePostgres = await startPostgres({ durable: true, statementStats: true }).catch(async (error: unknown) => {
  await postgres.stop();
  throw error;
});
try {
  const databases = {
    fresh: await postgres.createDatabase(),
    full: await postgres.createDatabase(),
    floor: await postgres.createDatabase(),
    durable: await durablePostgres.createDatabase(),
    durableFloor: await durablePostgres.createDatabase(),
  };
  const open = (connectionString: string) =>
    PostgresTaskStore.open(connectionString, { listen: false, maxConnections: CONCURRENCY });
  // ROWS finished tasks of the principal `sqlite@ROWS` creates as, written in bulk into a store file of its own
  const grownPath = join(dir, 'grown.db');
  await new SqliteTaskStore(grownPath).close();
  const grown = new Database(grownPath);
  grown
    .prepare(
      `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
       INSERT INTO tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms, expires_at,
         poll_interval_ms, resumable, result)
       SELECT 'filler-' || n, 'one', 'bench', '{}', 'completed', ?, ?, 3600000, ? + 3600000, 1000, 0, '{}' FROM g`,
    )
    .run(ROWS, Date.now(), Date.now(), Date.now());
  grown.close();
  const stores = {
    sqlite: new SqliteTaskStore(join(dir, 'full.db')),
    sqliteGrown: new SqliteTaskStore(grownPath),
    sqliteNormal: new SqliteTaskStore(join(dir, 'normal.db'), { synchronous: 'normal' }),
    fresh: await open(databases.fresh.connectionString),
    full: await open(databases.full.connectionString),
    durable: await open(databases.durable.connectionString),
  };
  const floor = await openFloor(databases.floor.connectionString);
  const durableFloor = await openFloor(databases.durableFloor.connectionString);
  const cluster = await clusterOf(databases.fresh.connectionString);
  const durableCluster = await clusterOf(databases.durable.connectionString);

  // ROWS finished tasks of the principal pg.1 creates as, written in bulk (the triggers count them as they land)
  const filler = new pg.Client({ connectionString: databases.full.connectionString });
  await filler.connect();
  const fillStarted = performance.now();
  await filler.query(
    `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
       expires_at, poll_interval_ms, resumable, result)
     SELECT 'filler-' || g, 'one', 'bench', '{}', 'completed', $2::bigint, $2::bigint, 3600000, $2::bigint + 3600000,
       1000, false, '{}'
     FROM generate_series(1, $1::int) g`,
    [ROWS, Date.now()],
  );
  await filler.query('VACUUM ANALYZE closeout_tasks');
  await filler.end();
  console.log(`filled ${ROWS} rows in ${fixed((performance.now() - fillStarted) / 1000, 1)} s\n`);

  const scenarios: Record<string, (tasks?: number) => Promise<Figures>> = {
    sqlite: (tasks) => run(stores.sqlite, () => 'one', tasks),
    [`sqlite@${ROWS}`]: (tasks) => run(stores.sqliteGrown, () => 'one', tasks),
    'sqlite.normal': (tasks) => run(stores.sqliteNormal, () => 'one', tasks),
    'pg.1': (tasks) => run(stores.fresh, () => 'one', tasks, cluster),
    'pg.16': (tasks) => run(stores.fresh, (worker) => `principal-${worker}`, tasks, cluster),
    [`pg.1@${ROWS}`]: (tasks) => run(stores.full, () => 'one', tasks, cluster),
    'pg.floor': (tasks) => run(floor, () => 'one', tasks, cluster),
    'pg.1.durable': (tasks) => run(stores.durable, () => 'one', tasks, durableCluster),
    'pg.floor.durable': (tasks) => run(durableFloor, () => 'one', tasks, durableCluster),
  };
  const names = Object.keys(scenarios);
  // warm-up, not measured: every pool connection opened, every statement planned, the JIT warm
  for (const name of names) await scenarios[name]!(Math.max(CONCURRENCY * 4, Math.ceil(TASKS / 5)));
  const figures = new Map<string, Figures[]>(names.map((name) => [name, []]));
  const ratios = {
    pgOverSqlite: [] as number[],
    pgOverSqliteNormal: [] as number[],
    oneOverSixteen: [] as number[],
    floorOverSqlite: [] as number[],
    oneOverFloor: [] as number[],
    durableOverSqlite: [] as number[],
    durableFloorOverSqlite: [] as number[],
  };
  const flat: number[] = [];
  const sqliteFlat: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const order = names.map((_, i) => names[(i + round) % names.length]!);
    const got = new Map<string, Figures>();
    for (const name of order) {
      const f = await scenarios[name]!();
      got.set(name, f);
      figures.get(name)!.push(f);
    }
    const rate = (name: string) => got.get(name)!.tasksPerSecond;
    ratios.pgOverSqlite.push(rate('pg.1') / rate('sqlite'));
    ratios.pgOverSqliteNormal.push(rate('pg.1') / rate('sqlite.normal'));
    ratios.oneOverSixteen.push(rate('pg.1') / rate('pg.16'));
    ratios.floorOverSqlite.push(rate('pg.floor') / rate('sqlite'));
    ratios.oneOverFloor.push(rate('pg.1') / rate('pg.floor'));
    ratios.durableOverSqlite.push(rate('pg.1.durable') / rate('sqlite'));
    ratios.durableFloorOverSqlite.push(rate('pg.floor.durable') / rate('sqlite'));
    flat.push(got.get(`pg.1@${ROWS}`)!.createP50 / got.get('pg.1')!.createP50);
    sqliteFlat.push(got.get(`sqlite@${ROWS}`)!.createP50 / got.get('sqlite')!.createP50);
  }

  const rows = names.map((name) => {
    const f = figures.get(name)!;
    return [
      name,
      fixed(median(f.map((x) => x.tasksPerSecond))),
      fixed(median(f.map((x) => x.createP50)), 2),
      fixed(median(f.map((x) => x.createP99)), 2),
    ];
  });
  console.log(table(['scenario', 'tasks/s', 'create p50 ms', 'create p99 ms'], rows));

  // where a task's time goes: with 2 cores shared by this process and the database, their CPU adds up to the wall
  // clock (the SQLite scenarios' database work is this process's CPU, and their fsyncs are neither)
  console.log('');
  console.log(
    table(
      [
        'per task (medians)',
        'wall µs',
        'this process CPU µs',
        'PostgreSQL CPU µs',
        'PostgreSQL exec µs',
        'PostgreSQL WAL B',
      ],
      names.map((name) => {
        const f = figures.get(name)!;
        const pgCpu = f.map((x) => x.postgresCpuUs).filter((x) => x !== undefined);
        const exec = f.map((x) => x.execUs).filter((x) => x !== undefined);
        const wal = f.map((x) => x.walBytes).filter((x) => x !== undefined);
        return [
          name,
          fixed(median(f.map((x) => x.wallUs))),
          fixed(median(f.map((x) => x.nodeCpuUs))),
          pgCpu.length > 0 ? fixed(median(pgCpu)) : '',
          exec.length > 0 ? fixed(median(exec)) : '',
          wal.length > 0 ? fixed(median(wal)) : '',
        ];
      }),
    ),
  );

  const trips = await roundTrips(stores.fresh);
  console.log('');
  console.log(
    table(
      ['per call (one at a time)', 'round trips'],
      (['create', 'get', 'finish'] as const).map((op) => [op, fixed(trips[op], 2)]),
    ),
  );

  const m = (values: number[]) => median(values);
  console.log('');
  console.log(
    table(
      ['target', 'measured', ''],
      [
        ['pg.1 / sqlite throughput >= 0.7', fixed(m(ratios.pgOverSqlite), 2), verdict(m(ratios.pgOverSqlite) >= 0.7)],
        ['pg.1 / sqlite.normal (for reference)', fixed(m(ratios.pgOverSqliteNormal), 2), ''],
        ['pg.floor / sqlite (any PostgreSQL store, for reference)', fixed(m(ratios.floorOverSqlite), 2), ''],
        ['pg.1 / pg.floor (this store against the floor)', fixed(m(ratios.oneOverFloor), 2), ''],
        [
          'pg.1.durable / sqlite, both syncing every commit, >= 0.7',
          fixed(m(ratios.durableOverSqlite), 2),
          verdict(m(ratios.durableOverSqlite) >= 0.7),
        ],
        ['pg.floor.durable / sqlite (the floor, syncing)', fixed(m(ratios.durableFloorOverSqlite), 2), ''],
        [
          'pg.1 / pg.16 throughput within 20%',
          fixed(m(ratios.oneOverSixteen), 2),
          verdict(Math.abs(m(ratios.oneOverSixteen) - 1) <= 0.2),
        ],
        ['round trips per create <= 2', fixed(trips.create, 2), verdict(trips.create <= 2)],
        ['round trips per get <= 1', fixed(trips.get, 2), verdict(trips.get <= 1)],
        [`create p50 at ${ROWS} rows / at 0 within 20%`, fixed(m(flat), 2), verdict(m(flat) <= 1.2)],
        [
          `sqlite: create p50 at ${ROWS} rows / at 0 within 20%`,
          fixed(m(sqliteFlat), 2),
          verdict(m(sqliteFlat) <= 1.2),
        ],
      ],
    ),
  );
  // the spread behind the median: each round's ratio, in the order the rounds ran
  console.log(`\npg.1 / sqlite by round: ${ratios.pgOverSqlite.map((r) => fixed(r, 2)).join(', ')}`);
  console.log(`pg.floor / sqlite by round: ${ratios.floorOverSqlite.map((r) => fixed(r, 2)).join(', ')}`);
  console.log(`pg.1.durable / sqlite by round: ${ratios.durableOverSqlite.map((r) => fixed(r, 2)).join(', ')}`);
  console.log(
    `pg.floor.durable / sqlite by round: ${ratios.durableFloorOverSqlite.map((r) => fixed(r, 2)).join(', ')}`,
  );
  await Promise.all([...Object.values(stores).map((store) => store.close()), floor.close(), durableFloor.close()]);
  await Promise.all([cluster.close(), durableCluster.close()]);
  for (const database of Object.values(databases)) await database.drop();
} finally {
  await Promise.all([postgres.stop(), durablePostgres.stop()]);
  rmSync(dir, { recursive: true, force: true });
}

function verdict(met: boolean): string {
  return met ? 'met' : 'NOT MET';
}
