/**
 * Benchmark (bench/RESULTS.md section 8c): can purge keep up with creation? A TaskServer (default lease and sweep
 * timers) serves a task tool with a short TTL (`--ttl-ms`) and a short retention (`--retention-ms`), so every task it
 * creates becomes purgeable `ttl + retention` after its creation; a load generator in a child process creates tasks
 * over HTTP back to back (16 in flight) for `--seconds`. Every second the benchmark counts, on a connection of its own,
 * the purgeable tasks not yet purged (the backlog), the rows stored and the tombstones (= tasks purged: none is older
 * than the 7 days after which tombstones go). Per minute: creation rate, purge rate, backlog median and max. Target:
 * the backlog flat over 10 minutes (last minute's median no higher than the first full minute's, plus a sweep's worth).
 *
 *   node dist/bench/bench/purgeRate.js [--smoke] [--seconds 600] [--store sqlite|postgres] [--ttl-ms 5000]
 *     [--retention-ms 5000] [--requests 2000] [--concurrency 16]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import Database from 'better-sqlite3';
import { PostgresTaskStore, serveTaskServer, SqliteTaskStore, TaskServer, type TaskStore } from 'closeout/server';
import pg from 'pg';

import { startPostgres } from '../test/support/postgres.js';
import { wireRequest } from '../test/support/rpc.js';
import { fixed, machineLine, median, table } from './figures.js';
import { runLoad } from './loadGenerator.js';
import { timedStore } from './storeTimings.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    seconds: { type: 'string' },
    store: { type: 'string', default: 'sqlite' },
    'ttl-ms': { type: 'string' },
    'retention-ms': { type: 'string' },
    requests: { type: 'string' },
    concurrency: { type: 'string' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
if (flags.store !== 'sqlite' && flags.store !== 'postgres') throw new Error('--store: sqlite or postgres');
const seconds = positive(flags.seconds, flags.smoke ? 6 : 600);
const ttlMs = positive(flags['ttl-ms'], flags.smoke ? 500 : 5000);
const retentionMs = positive(flags['retention-ms'], flags.smoke ? 500 : 5000);
const requests = positive(flags.requests, flags.smoke ? 100 : 2000);
const concurrency = positive(flags.concurrency, flags.smoke ? 4 : 16);
/** Backlog samples are grouped in buckets of this long (a minute; a second in the smoke run). */
const BUCKET_MS = flags.smoke ? 1000 : 60_000;
const TOOL = 'brief';

interface Counts {
  backlog: number;
  stored: number;
  purged: number;
}

interface Sample extends Counts {
  at: number;
}

/** The store, and a connection of the benchmark's own that counts what it holds. */
async function openStore(): Promise<{
  store: TaskStore;
  count: (now: number) => Promise<Counts>;
  close: () => Promise<void>;
}> {
  if (flags.store === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-purge-'));
    const path = join(dir, 'tasks.db');
    const store = new SqliteTaskStore(path);
    const reader = new Database(path, { readonly: true });
    const backlog = reader.prepare(
      `SELECT count(*) AS n FROM tasks WHERE status IN ('completed','failed','cancelled') AND expires_at <= ?`,
    );
    const stored = reader.prepare(`SELECT count(*) AS n FROM tasks`);
    const purged = reader.prepare(`SELECT count(*) AS n FROM purged_tasks`);
    const n = (row: unknown) => (row as { n: number }).n;
    return {
      store,
      count: async (now) =>
        reader.transaction(() => ({
          backlog: n(backlog.get(now - retentionMs)),
          stored: n(stored.get()),
          purged: n(purged.get()),
        }))(),
      close: async () => {
        reader.close();
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const postgres = await startPostgres();
  const database = await postgres.createDatabase();
  const store = await PostgresTaskStore.open(database.connectionString);
  const reader = new pg.Client({ connectionString: database.connectionString });
  await reader.connect();
  return {
    store,
    count: async (now) => {
      const { rows } = await reader.query<{ backlog: string; stored: string; purged: string }>(
        `SELECT (SELECT count(*) FROM closeout_tasks
                 WHERE status IN ('completed','failed','cancelled') AND expires_at <= $1) AS backlog,
                (SELECT count(*) FROM closeout_tasks) AS stored,
                (SELECT count(*) FROM closeout_purged_tasks) AS purged`,
        [now - retentionMs],
      );
      return { backlog: Number(rows[0]!.backlog), stored: Number(rows[0]!.stored), purged: Number(rows[0]!.purged) };
    },
    close: async () => {
      await reader.end();
      await store.close();
      await database.drop();
      await postgres.stop();
    },
  };
}

const opened = await openStore();
const { store, calls } = timedStore(opened.store);
const errors: string[] = [];
const tasks = new TaskServer({ store, retentionMs, onError: (e) => errors.push(e.message) });
tasks.registerTool(TOOL, { task: { support: 'required', ttlMs } }, () => ({ content: [{ type: 'text', text: 'ok' }] }));
await tasks.start();
const serving = await serveTaskServer(tasks, { port: 0, onerror: (e) => errors.push(e.message) });
const samples: Sample[] = [];
let created = 0;

try {
  console.log(
    `purgeRate · ${machineLine()} · load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `${flags.store === 'sqlite' ? 'SQLite' : 'PostgreSQL'}: tools/call -> CreateTaskResult over HTTP, ${concurrency} in flight, for ${seconds} s; TTL ${ttlMs} ms, retention ${retentionMs} ms (purgeable ${ttlMs + retentionMs} ms after creation); backlog counted every second`,
  );
  const started = Date.now();
  let sampling = Promise.resolve();
  const sampler = setInterval(() => {
    sampling = sampling.then(async () => {
      const at = Date.now();
      samples.push({ at: at - started, ...(await opened.count(at)) });
    });
  }, 1000);
  const request = wireRequest('tools/call', { name: TOOL, arguments: {} }, { declareTasks: true });
  try {
    // bounded: by time, and by a count of windows
    for (let w = 0; Date.now() - started < seconds * 1000 && w < 100_000; w++) {
      const result = await runLoad({
        url: serving.url,
        request,
        concurrency,
        requests,
        warmup: 0,
        expect: '"resultType":"task"',
        deadlineMs: 300_000,
      });
      if (result.failures > 0)
        throw new Error(`${result.failures} unexpected responses, first: ${result.firstFailure}`);
      created += result.requests;
    }
  } finally {
    clearInterval(sampler);
    await sampling;
  }

  // per bucket: rates from the first to the last sample in it, backlog median and max
  const buckets = new Map<number, Sample[]>();
  for (const s of samples) {
    const key = Math.floor(s.at / BUCKET_MS);
    buckets.set(key, [...(buckets.get(key) ?? []), s]);
  }
  const rows: string[][] = [];
  const medians: number[] = [];
  let previous: Sample | undefined;
  for (const [key, bucket] of [...buckets.entries()].sort((a, b) => a[0] - b[0])) {
    const first = previous ?? bucket[0]!;
    const last = bucket.at(-1)!;
    const span = (last.at - first.at) / 1000;
    const backlogMedian = median(bucket.map((s) => s.backlog));
    medians.push(backlogMedian);
    rows.push([
      fixed(((key + 1) * BUCKET_MS) / 1000),
      // every task created is stored or purged (no tombstone is old enough to be dropped)
      fixed(span > 0 ? (last.stored + last.purged - first.stored - first.purged) / span : Number.NaN),
      fixed(span > 0 ? (last.purged - first.purged) / span : Number.NaN),
      fixed(backlogMedian),
      fixed(Math.max(...bucket.map((s) => s.backlog))),
      String(last.stored),
      String(last.purged),
    ]);
    previous = last;
  }
  console.log('');
  console.log(
    table(['until s', 'created/s', 'purged/s', 'backlog median', 'backlog max', 'stored', 'purged (total)'], rows),
  );
  const purgeSteps = calls.filter((c) => c.name === 'purge').map((c) => c.end - c.start);
  console.log('');
  console.log(
    `created ${created} tasks in ${fixed((Date.now() - started) / 1000)} s; purge steps ${purgeSteps.length}, median ${fixed(median(purgeSteps), 1)} ms, max ${fixed(Math.max(...purgeSteps), 1)} ms; errors ${errors.length}${errors.length > 0 ? ` (first: ${errors[0]})` : ''}`,
  );
  // the first bucket is the start (nothing purgeable yet) and the last may be partial: compare the first full
  // bucket after the first purge was possible with the last full one; a sweep (3.3 s) of creation is the slack
  const full = medians.slice(Math.ceil((ttlMs + retentionMs) / BUCKET_MS), -1);
  const creationRate = created / ((Date.now() - started) / 1000);
  const slack = Math.ceil(creationRate * (10_000 / 3 / 1000));
  if (full.length >= 2) {
    const [head, tail] = [full[0]!, full.at(-1)!];
    console.log(
      table(
        ['target', 'measured', ''],
        [
          [
            `backlog flat: last bucket median <= first + ${slack}`,
            `${fixed(head)} -> ${fixed(tail)}`,
            tail <= head + slack ? 'met' : 'NOT MET',
          ],
        ],
      ),
    );
  } else console.log('backlog flat: run too short to compare two full buckets');
} finally {
  await serving.close();
  await tasks.close();
  await opened.close();
}
