/**
 * Benchmark (bench/RESULTS.md section 8b): does a store that weeks of traffic have filled slow the server down? Two
 * stores side by side: one empty, one seeded with bulk SQL inserts (not through the API) with `--tombstones` purge
 * tombstones (3 million: the 7 days of tombstones that 5 tasks/s leave) and `--retained` finished tasks inside their
 * retention (300,000). Each round opens a TaskServer (default lease and sweep timers, so expiry and purge sweep the
 * large tables during the window) on each store in turn, creates 64 long tasks, and polls them with tasks/get at a
 * fixed rate from a child process. Figures: tasks/get p50/p99, the event-loop block, the slowest housekeeping step;
 * and the ratio grown/empty of the p99 within each round, median over rounds. Target: within 20%.
 *
 *   node dist/bench/bench/storeGrowth.js [--smoke] [--tombstones 3000000] [--retained 300000] [--rounds 3]
 *     [--seconds 20] [--rate 50] [--skip-postgres]
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import Database from 'better-sqlite3';
import { PostgresTaskStore, serveTaskServer, SqliteTaskStore, TaskServer, type TaskStore } from 'closeout/server';
import pg from 'pg';

import { startPostgres } from '../test/support/postgres.js';
import { fixed, machineLine, median, table } from './figures.js';
import { runPacedGets } from './pacedGets.js';
import { timedStore } from './storeTimings.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tombstones: { type: 'string' },
    retained: { type: 'string' },
    rounds: { type: 'string' },
    seconds: { type: 'string' },
    rate: { type: 'string' },
    'skip-postgres': { type: 'boolean', default: false },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const tombstones = positive(flags.tombstones, flags.smoke ? 20_000 : 3_000_000);
const retained = positive(flags.retained, flags.smoke ? 2_000 : 300_000);
const rounds = positive(flags.rounds, flags.smoke ? 1 : 3);
const seconds = positive(flags.seconds, flags.smoke ? 1 : 20);
const rate = positive(flags.rate, flags.smoke ? 20 : 50);
const HOLDING = 64;
const DAY_MS = 24 * 3600_000;
const HOUR_MS = 3600_000;

interface Window {
  p50Ms: number;
  p99Ms: number;
  loopMaxMs: number;
  housekeepMaxMs: number;
  failures: number;
  errors: string[];
}

/** One window on one store: a TaskServer, 64 held tasks polled at `rate` for `seconds`. */
async function window(rawStore: TaskStore): Promise<Window> {
  const { store, calls } = timedStore(rawStore);
  const errors: string[] = [];
  const tasks = new TaskServer({ store, onError: (e) => errors.push(e.message) });
  tasks.registerTool('hold', { task: { support: 'required', ttlMs: null } }, (_args, ctx) => {
    return new Promise((_resolve, reject) => {
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
    });
  });
  await tasks.start();
  const serving = await serveTaskServer(tasks, { port: 0, onerror: (e) => errors.push(e.message) });
  const loop = monitorEventLoopDelay({ resolution: 10 });
  try {
    const tool = tasks.tool('hold')!;
    const taskIds: string[] = [];
    for (let i = 0; i < HOLDING; i++) taskIds.push((await tasks.createTask(tool, {}, 'anonymous', undefined)).taskId);
    const from = performance.now();
    loop.enable();
    const gets = await runPacedGets({ url: serving.url, taskIds, rate, seconds });
    loop.disable();
    const housekeeping = calls
      .filter((c) => (c.name === 'purge' || c.name === 'expireOverdue') && c.start >= from)
      .map((c) => c.end - c.start);
    // the held tasks are cancelled, so the next window's store does not take them over
    for (const taskId of taskIds) await tasks.cancelTask(taskId, 'anonymous');
    return {
      p50Ms: gets.p50Ms,
      p99Ms: gets.p99Ms,
      loopMaxMs: loop.max / 1e6,
      housekeepMaxMs: housekeeping.length > 0 ? Math.max(...housekeeping) : Number.NaN,
      failures: gets.failures,
      errors,
    };
  } finally {
    loop.disable();
    await serving.close();
    await tasks.close();
  }
}

// ---- seeding, with bulk SQL -----------------------------------------------------------------------------------------

/** Tombstones purged over the last 6 days (kept 7), and finished tasks whose retention runs for another half hour. */
function seedSqlite(path: string, now: number): void {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.transaction(() => {
      db.prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
         INSERT INTO purged_tasks (task_id, owner, purged_at)
         SELECT 'purged-' || printf('%09d', i), 'caller-' || (i % 64), ? - (i * 7919) % ? FROM n`,
      ).run(tombstones, now, 6 * DAY_MS);
      db.prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
         INSERT INTO tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
                            expires_at, poll_interval_ms, resumable, result, fence, attempt)
         SELECT 'retained-' || printf('%09d', i), 'caller-' || (i % 64), 'hold', '{}', 'completed', ? - ?, ? - ?, ?,
                ? - ? + ?, 1000, 0, '{"content":[{"type":"text","text":"' || hex(randomblob(64)) || '"}]}', 1, 1
         FROM n`,
      ).run(retained, now, HOUR_MS / 2, now, HOUR_MS / 4, HOUR_MS, now, HOUR_MS / 2, HOUR_MS);
    })();
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
}

async function seedPostgres(connectionString: string, now: number): Promise<void> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query(
      `INSERT INTO closeout_purged_tasks (task_id, owner, purged_at)
       SELECT 'purged-' || lpad(i::text, 9, '0'), 'caller-' || (i % 64), $2::bigint - (i * 7919) % $3::bigint
       FROM generate_series(0, $1::bigint - 1) AS i`,
      [tombstones, now, 6 * DAY_MS],
    );
    await client.query(
      `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
                                   expires_at, poll_interval_ms, resumable, result, fence, attempt)
       SELECT 'retained-' || lpad(i::text, 9, '0'), 'caller-' || (i % 64), 'hold', '{}', 'completed',
              $2::bigint - $3::bigint, $2::bigint - $3::bigint / 2, $4::bigint, $2::bigint - $3::bigint + $4::bigint,
              1000, false, '{"content":[{"type":"text","text":"' || md5(i::text) || md5((i + 1)::text) || '"}]}', 1, 1
       FROM generate_series(0, $1::bigint - 1) AS i`,
      [retained, now, HOUR_MS / 2, HOUR_MS],
    );
    await client.query('VACUUM ANALYZE closeout_purged_tasks');
    await client.query('VACUUM ANALYZE closeout_tasks');
  } finally {
    await client.end();
  }
}

// ---- the run --------------------------------------------------------------------------------------------------------

interface Pair {
  store: string;
  empty: Window[];
  grown: Window[];
  seedMs: number;
  size: string;
}

/** Rounds of (empty, grown) windows, the order rotated each round. */
async function rounds_(open: (which: 'empty' | 'grown') => Promise<{ store: TaskStore; close: () => Promise<void> }>) {
  const empty: Window[] = [];
  const grown: Window[] = [];
  // one unmeasured window first, so neither store pays for the process warming up
  const warm = await open('empty');
  try {
    await window(warm.store);
  } finally {
    await warm.close();
  }
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? (['empty', 'grown'] as const) : (['grown', 'empty'] as const);
    for (const which of order) {
      const opened = await open(which);
      try {
        (which === 'empty' ? empty : grown).push(await window(opened.store));
      } finally {
        await opened.close();
      }
    }
  }
  return { empty, grown };
}

const pairs: Pair[] = [];
const skipped: string[] = [];
console.log(
  `storeGrowth · ${machineLine()} · load average ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
console.log(
  `tasks/get on 64 working tasks at ${rate}/s for ${seconds} s, empty store against one with ${tombstones} tombstones and ${retained} retained finished tasks (bulk SQL), ${rounds} round(s), order rotated`,
);

{
  const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-growth-'));
  try {
    const paths = { empty: join(dir, 'empty.db'), grown: join(dir, 'grown.db') };
    for (const path of Object.values(paths)) await new SqliteTaskStore(path).close();
    const seedStart = performance.now();
    seedSqlite(paths.grown, Date.now());
    const seedMs = performance.now() - seedStart;
    const result = await rounds_(async (which) => {
      const store = new SqliteTaskStore(paths[which]);
      return { store, close: () => store.close() };
    });
    pairs.push({ store: 'SQLite', ...result, seedMs, size: `${fixed(statSync(paths.grown).size / 2 ** 20)} MiB` });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// the smoke run keeps to SQLite: seeding and starting a PostgreSQL cluster take longer than a smoke run may
if (!flags['skip-postgres'] && !flags.smoke) {
  let postgres;
  try {
    postgres = await startPostgres();
  } catch (error) {
    skipped.push(`PostgreSQL skipped: it could not start (${String(error).split('\n')[0]})`);
  }
  if (postgres) {
    try {
      const databases = { empty: await postgres.createDatabase(), grown: await postgres.createDatabase() };
      for (const database of Object.values(databases))
        await (await PostgresTaskStore.open(database.connectionString)).close();
      const seedStart = performance.now();
      await seedPostgres(databases.grown.connectionString, Date.now());
      const seedMs = performance.now() - seedStart;
      const client = new pg.Client({ connectionString: databases.grown.connectionString });
      await client.connect();
      const { rows } = await client.query<{ size: string }>(
        `SELECT pg_size_pretty(pg_database_size(current_database())) AS size`,
      );
      await client.end();
      const result = await rounds_(async (which) => {
        const store = await PostgresTaskStore.open(databases[which].connectionString);
        return { store, close: () => store.close() };
      });
      pairs.push({ store: 'PostgreSQL', ...result, seedMs, size: rows[0]!.size });
    } finally {
      await postgres.stop();
    }
  }
}

console.log('');
const rows: string[][] = [];
for (const pair of pairs) {
  for (const which of ['empty', 'grown'] as const) {
    const windows = pair[which];
    rows.push([
      `${pair.store} ${which}`,
      fixed(median(windows.map((w) => w.p50Ms)), 1),
      fixed(median(windows.map((w) => w.p99Ms)), 1),
      fixed(median(windows.map((w) => w.loopMaxMs))),
      fixed(median(windows.map((w) => w.housekeepMaxMs)), 1),
      String(windows.reduce((n, w) => n + w.failures + w.errors.length, 0)),
    ]);
  }
}
console.log(
  table(
    ['median over rounds', 'tasks/get p50 ms', 'p99 ms', 'loop block max ms', 'housekeeping max ms', 'errors'],
    rows,
  ),
);
for (const pair of pairs)
  console.log(`${pair.store}: seeded in ${fixed(pair.seedMs / 1000, 1)} s, grown store ${pair.size}`);
for (const line of skipped) console.log(line);
for (const pair of pairs)
  for (const w of [...pair.empty, ...pair.grown]) if (w.errors.length > 0) console.log(`${pair.store}: ${w.errors[0]}`);

console.log('');
const targets = pairs.map((pair) => {
  const ratio = median(pair.grown.map((g, i) => g.p99Ms / pair.empty[i]!.p99Ms));
  return [`${pair.store}: tasks/get p99 grown/empty <= 1.2`, fixed(ratio, 2), ratio <= 1.2 ? 'met' : 'NOT MET'];
});
console.log(table(['target', 'measured', ''], targets));
for (const pair of pairs)
  console.log(
    `${pair.store}: p99 grown/empty by round ${pair.grown.map((g, i) => fixed(g.p99Ms / pair.empty[i]!.p99Ms, 2)).join(', ')}; p50 ${pair.grown.map((g, i) => fixed(g.p50Ms / pair.empty[i]!.p50Ms, 2)).join(', ')}`,
  );
