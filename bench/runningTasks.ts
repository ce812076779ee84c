/**
 * Benchmark (bench/RESULTS.md section 8a): running tasks per instance against the lease loop. One TaskServer (a lease
 * of 10 s unless --lease-ms, renewed every 3.3 s) on SQLite and on PostgreSQL is sent N long tasks in a burst, then holds them for
 * `--hold-seconds` while a child process polls tasks/get over HTTP at a fixed rate. The burst is tools/call over HTTP
 * from a child process, 16 in flight (`--burst http`), or, by default, `TaskServer.createTask` in this process, 16 in
 * flight, the event loop turning between two creates as it does between two requests (`--burst direct`: on a
 * loaded machine the HTTP path creates ten times fewer tasks per second, and 12,000 took over ten minutes). The first count (100) is the baseline: the same process, loop and machine with
 * almost nothing to renew. The per-principal open-task limit is raised for the run (every request is the same
 * anonymous principal): it is not what is measured. Figures per store and N, side by side in one run:
 *
 * - sweep: one lease tick, from the renewal's start to the end of the orphan claim that follows it (max);
 * - renewal period: between two renewals that landed (max), and the least time a lease had left when renewed;
 * - event-loop block: `monitorEventLoopDelay` (10 ms resolution) over the hold, max and p99;
 * - tasks/get p50 and p99 from the poller (open loop, so a stall shows as latency);
 * - lapses (a task whose attempt is not 1 or that is no longer working), re-runs (handler starts beyond one per
 *   task) and errors the server reported: the target is zero of each, without a fault, at 12,000 on either store;
 *   and an event-loop block under 100 ms at 12,000 on SQLite.
 *
 *   node dist/bench/bench/runningTasks.js [--smoke] [--counts 2000,6000,12000] [--hold-seconds 30] [--rate 50]
 *     [--lease-ms 10000] [--skip-postgres] [--only sqlite|postgres]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { serveTaskServer, SqliteTaskStore, TaskServer, type TaskStore } from 'closeout/server';

import { wireRequest } from '../test/support/rpc.js';
import { fixed, machineLine, median, table } from './figures.js';
import { runLoad } from './loadGenerator.js';
import { runPacedGets } from './pacedGets.js';
import { openPostgresStore } from './postgresStore.js';
import { type StoreCall, timedStore } from './storeTimings.js';

/** Resolves once `done()` holds, checking every 50 ms; throws after `timeoutMs`. */
async function waitFor(done: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`not done after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    counts: { type: 'string' },
    'hold-seconds': { type: 'string' },
    rate: { type: 'string' },
    'lease-ms': { type: 'string' },
    'skip-postgres': { type: 'boolean', default: false },
    only: { type: 'string' },
    burst: { type: 'string', default: 'direct' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const counts = (flags.counts ?? (flags.smoke ? '60' : '100,2000,6000,12000')).split(',').map((c) => positive(c, 0));
const holdSeconds = positive(flags['hold-seconds'], flags.smoke ? 3 : 30);
const rate = positive(flags.rate, flags.smoke ? 20 : 50);
const leaseMs = positive(flags['lease-ms'], flags.smoke ? 2000 : 10_000);
if (flags.only !== undefined && flags.only !== 'sqlite' && flags.only !== 'postgres')
  throw new Error('--only: sqlite or postgres');
if (flags.burst !== 'direct' && flags.burst !== 'http') throw new Error('--burst: direct or http');
const IN_FLIGHT = 16;
const HOLD_TOOL = 'hold';

interface Cell {
  store: string;
  running: number;
  createsPerSecond: number;
  sweepMaxMs: number;
  renewMaxMs: number;
  periodMedianMs: number;
  periodMaxMs: number;
  headroomMinMs: number;
  housekeepMaxMs: number;
  loopMaxMs: number;
  loopP99Ms: number;
  burstLoopMaxMs: number;
  getP50Ms: number;
  getP99Ms: number;
  getFailures: number;
  getFirstFailure: string | undefined;
  lapses: number;
  reruns: number;
  errors: string[];
}

/** N tasks held on `store` for the hold window; every figure of one cell. */
async function measure(storeName: string, rawStore: TaskStore, running: number): Promise<Cell> {
  const { store, calls } = timedStore(rawStore);
  const errors: string[] = [];
  const tasks = new TaskServer({
    store,
    leaseMs,
    maxOpenTasksPerPrincipal: 2 * running,
    onError: (e) => errors.push(e.message),
  });
  const starts = new Map<string, number>();
  tasks.registerTool(HOLD_TOOL, { task: { support: 'required', ttlMs: null } }, (_args, ctx) => {
    starts.set(ctx.taskId!, (starts.get(ctx.taskId!) ?? 0) + 1);
    return new Promise((_resolve, reject) => {
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
    });
  });
  await tasks.start();
  const serving = await serveTaskServer(tasks, { port: 0, onerror: (e) => errors.push(e.message) });
  const loop = monitorEventLoopDelay({ resolution: 10 });
  try {
    loop.enable();
    const burstStart = performance.now();
    if (flags.burst === 'http') {
      const burst = await runLoad({
        url: serving.url,
        request: wireRequest('tools/call', { name: HOLD_TOOL, arguments: {} }, { declareTasks: true }),
        concurrency: IN_FLIGHT,
        requests: running,
        warmup: 0,
        expect: '"resultType":"task"',
        deadlineMs: 3_600_000,
      });
      if (burst.failures > 0) throw new Error(`${burst.failures} creates failed, first: ${burst.firstFailure}`);
    } else {
      const tool = tasks.tool(HOLD_TOOL)!;
      let next = 0;
      await Promise.all(
        Array.from({ length: IN_FLIGHT }, async () => {
          while (next < running) {
            next++;
            // the principal an HTTP request without auth has, so the poller can read these tasks
            await tasks.createTask(tool, {}, 'anonymous', undefined);
            await new Promise((resolve) => setImmediate(resolve));
          }
        }),
      );
    }
    const burstMs = performance.now() - burstStart;
    // a handler starts once its lease is proven (at once, or at the next renewal)
    await waitFor(() => starts.size >= running, 60_000);
    const taskIds = [...starts.keys()];
    const readable = taskIds.filter((_, i) => i % 64 === 0);
    const burstLoopMaxMs = loop.max / 1e6;
    loop.reset();
    const holdStart = performance.now();
    const gets = await runPacedGets({ url: serving.url, taskIds: readable, rate, seconds: holdSeconds });
    const holdEnd = performance.now();
    const loopMaxMs = loop.max / 1e6;
    const loopP99Ms = loop.percentile(99) / 1e6;
    loop.disable();

    // outcomes: every task still working on its first attempt, its handler started once
    let lapses = 0;
    for (let from = 0; from < taskIds.length; from += 200) {
      const batch = await Promise.all(taskIds.slice(from, from + 200).map((id) => rawStore.get(id)));
      lapses += batch.filter((t) => !t || t.attempt !== 1 || t.status !== 'working').length;
    }
    const reruns = [...starts.values()].reduce((sum, n) => sum + n - 1, 0);

    return {
      store: storeName,
      running,
      createsPerSecond: (running / burstMs) * 1000,
      ...leaseFigures(calls, burstStart, holdStart, holdEnd),
      loopMaxMs,
      loopP99Ms,
      burstLoopMaxMs,
      getP50Ms: gets.p50Ms,
      getP99Ms: gets.p99Ms,
      getFailures: gets.failures,
      getFirstFailure: gets.firstFailure,
      lapses,
      reruns: Math.max(0, reruns),
      errors,
    };
  } finally {
    loop.disable();
    await serving.close();
    await tasks.close();
  }
}

/** Sweep, renewal and housekeeping figures from the timed store calls. */
function leaseFigures(calls: StoreCall[], burstStart: number, holdStart: number, holdEnd: number) {
  const renewals = calls.filter((c) => c.name === 'renewLeases' && (c.leases ?? 0) > 0 && (c.until ?? 0) > 0);
  const sweeps: number[] = [];
  for (const claim of calls.filter((c) => c.name === 'claimOrphans' && c.start >= holdStart && c.end <= holdEnd)) {
    const renewal = renewals.filter((r) => r.start <= claim.start).at(-1);
    if (renewal) sweeps.push(claim.end - renewal.start);
  }
  // from the burst on: every renewal that landed, how long after the one before, and what time the leases it
  // renewed had left (the expiry the one before set, minus the moment this one landed); below zero is a lapse
  const landed = renewals.filter((r) => r.start >= burstStart && r.end <= holdEnd).sort((a, b) => a.end - b.end);
  const periods: number[] = [];
  const headrooms: number[] = [];
  for (let i = 1; i < landed.length; i++) {
    periods.push(landed[i]!.end - landed[i - 1]!.end);
    headrooms.push(landed[i - 1]!.until! - (performance.timeOrigin + landed[i]!.end));
  }
  const housekeeping = calls
    .filter((c) => (c.name === 'purge' || c.name === 'expireOverdue') && c.start >= holdStart && c.end <= holdEnd)
    .map((c) => c.end - c.start);
  const holdRenewals = landed.filter((r) => r.start >= holdStart).map((r) => r.end - r.start);
  return {
    sweepMaxMs: sweeps.length > 0 ? Math.max(...sweeps) : Number.NaN,
    renewMaxMs: holdRenewals.length > 0 ? Math.max(...holdRenewals) : Number.NaN,
    periodMedianMs: median(periods),
    periodMaxMs: periods.length > 0 ? Math.max(...periods) : Number.NaN,
    headroomMinMs: headrooms.length > 0 ? Math.min(...headrooms) : Number.NaN,
    housekeepMaxMs: housekeeping.length > 0 ? Math.max(...housekeeping) : Number.NaN,
  };
}

/** Each cell on stderr as soon as it is measured, so a run cut short still leaves its figures. */
function progress(c: Cell): void {
  console.error(`measured ${JSON.stringify({ ...c, errors: c.errors.length })}`);
}

const cells: Cell[] = [];
const skipped: string[] = [];
console.log(
  `runningTasks · ${machineLine()} · load average ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
console.log(
  `${counts.join(' / ')} long tasks created in a burst (${IN_FLIGHT} in flight), held ${holdSeconds} s; lease ${leaseMs} ms, renewed every ${Math.max(50, Math.floor(leaseMs / 3))} ms; tasks/get at ${rate}/s from a child process`,
);

if (flags.only !== 'postgres') {
  for (const running of counts) {
    const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-running-'));
    const store = new SqliteTaskStore(join(dir, 'tasks.db'));
    try {
      cells.push(await measure('SQLite', store, running));
      progress(cells.at(-1)!);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
if (flags.only !== 'sqlite' && !flags['skip-postgres']) {
  for (const running of counts) {
    const opened = await openPostgresStore();
    if ('skipped' in opened) {
      skipped.push(`PostgreSQL skipped: ${opened.skipped}`);
      break;
    }
    try {
      cells.push(await measure('PostgreSQL', opened.store, running));
      progress(cells.at(-1)!);
    } finally {
      await opened.close();
    }
  }
}

console.log('');
console.log(
  table(
    [
      'store',
      'running',
      'creates/s',
      'sweep max ms',
      'renew max ms',
      'renewal period p50 ms',
      'max ms',
      'least lease left ms',
      'housekeeping max ms',
      'loop block max ms',
      'p99 ms',
      'in burst ms',
      'tasks/get p50 ms',
      'p99 ms',
      'lapses',
      're-runs',
      'errors',
    ],
    cells.map((c) => [
      c.store,
      String(c.running),
      fixed(c.createsPerSecond),
      fixed(c.sweepMaxMs),
      fixed(c.renewMaxMs),
      fixed(c.periodMedianMs),
      fixed(c.periodMaxMs),
      fixed(c.headroomMinMs),
      fixed(c.housekeepMaxMs),
      fixed(c.loopMaxMs),
      fixed(c.loopP99Ms),
      fixed(c.burstLoopMaxMs),
      fixed(c.getP50Ms, 1),
      fixed(c.getP99Ms, 1),
      String(c.lapses),
      String(c.reruns),
      String(c.errors.length),
    ]),
  ),
);
for (const line of skipped) console.log(line);
for (const c of cells) {
  if (c.getFailures > 0)
    console.log(`${c.store} ${c.running}: ${c.getFailures} tasks/get failed, first: ${c.getFirstFailure}`);
  if (c.errors.length > 0) console.log(`${c.store} ${c.running}: first error reported: ${c.errors[0]}`);
}

console.log('');
const largest = Math.max(...counts);
const targets: string[][] = [];
for (const c of cells.filter((c) => c.running === largest)) {
  const clean = c.lapses === 0 && c.reruns === 0 && c.errors.length === 0;
  targets.push([`${c.store} ${largest}: 0 lapses, 0 re-runs`, `${c.lapses}, ${c.reruns}`, clean ? 'met' : 'NOT MET']);
  if (c.store === 'SQLite')
    targets.push([
      `SQLite ${largest}: event-loop block < 100 ms`,
      `${fixed(c.loopMaxMs)} ms`,
      c.loopMaxMs < 100 ? 'met' : 'NOT MET',
    ]);
}
console.log(table(['target', 'measured', ''], targets));
