/**
 * Benchmark (bench/RESULTS.md section 6): the SQLite task store's write-ahead log under sustained load. Closeout over
 * loopback HTTP answers `tools/call` with CreateTaskResults back to back (a commit, then the handler's result committed
 * too) for `--seconds`, in windows of `--requests`; after each window the table shows the throughput of that window,
 * its p99, the largest WAL seen during it (sampled every 100 ms) and the database file's size. A bounded WAL is a flat
 * "WAL max" column while the database grows with the tasks it retains. `--direct` drives the store itself (create,
 * then finish, back to back, no HTTP: the most writes a machine can make); `--synchronous normal` takes the faster,
 * not power-loss-safe commits.
 *
 *   node dist/bench/bench/walGrowth.js [--smoke] [--seconds 180] [--requests 4000] [--concurrency 16] [--direct]
 *     [--synchronous full|normal]
 */
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { SqliteTaskStore } from 'closeout/server';

import { wireRequest } from '../test/support/rpc.js';
import { fixed, machineLine, percentile, table } from './figures.js';
import { positive } from './flags.js';
import { runLoad } from './loadGenerator.js';
import { ECHO_ARGUMENTS, ECHO_TOOL, startCloseoutServer } from './servers.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    seconds: { type: 'string' },
    requests: { type: 'string' },
    concurrency: { type: 'string' },
    direct: { type: 'boolean', default: false },
    synchronous: { type: 'string', default: 'full' },
  },
});
if (flags.synchronous !== 'full' && flags.synchronous !== 'normal') throw new Error('--synchronous: full or normal');
const synchronous = flags.synchronous;
const seconds = positive(flags.seconds, flags.smoke ? 3 : 180);
const requests = positive(flags.requests, flags.smoke ? 200 : 4000);
const concurrency = positive(flags.concurrency, flags.smoke ? 4 : 16);
const MiB = 1024 * 1024;

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-wal-'));
const path = join(dir, 'tasks.db');
const size = (file: string) => (existsSync(file) ? statSync(file).size : 0);
const store = new SqliteTaskStore(path, { synchronous });
// every task is kept (the default retention outlasts the run), and one caller makes them all: at 16 in flight the
// default per-principal limit (100,000 stored tasks) is reached within the run since SQLite commits in groups
const server = await startCloseoutServer(store, undefined, { maxStoredTasksPerPrincipal: Infinity });
let walMax = 0;
const sampler = setInterval(() => (walMax = Math.max(walMax, size(`${path}-wal`))), 100);

try {
  console.log(`walGrowth · ${machineLine()}`);
  console.log(
    flags.direct
      ? `SqliteTaskStore create + finish back to back in-process (synchronous ${synchronous}, background checkpoints), windows of ${requests} tasks for ${seconds} s`
      : `tools/call -> CreateTaskResult on SQLite (synchronous ${synchronous}, background checkpoints), ${concurrency} in flight, windows of ${requests} requests for ${seconds} s`,
  );
  const request = wireRequest('tools/call', { name: ECHO_TOOL, arguments: ECHO_ARGUMENTS }, { declareTasks: true });
  const rows: string[][] = [];
  const started = Date.now();
  let total = 0;
  let overallMax = 0;
  // bounded: by time, and by a count of windows
  for (let window = 0; Date.now() - started < seconds * 1000 && window < 10_000; window++) {
    walMax = size(`${path}-wal`);
    const result = flags.direct
      ? await direct(requests, total)
      : await runLoad({
          url: server.url,
          request,
          concurrency,
          requests,
          warmup: 0,
          expect: '"resultType":"task"',
          deadlineMs: 120_000,
        });
    if (result.failures > 0) throw new Error(`${result.failures} unexpected responses, first: ${result.firstFailure}`);
    total += result.requests;
    walMax = Math.max(walMax, size(`${path}-wal`));
    overallMax = Math.max(overallMax, walMax);
    rows.push([
      fixed((Date.now() - started) / 1000),
      String(total),
      fixed(result.throughput),
      fixed(result.p99Ms, 2),
      fixed(walMax / MiB, 1),
      fixed(size(path) / MiB, 1),
    ]);
  }
  console.log('');
  console.log(table(['s', 'tasks', 'req/s', 'p99 ms', 'WAL max MiB', 'db MiB'], rows));
  console.log('');
  console.log(`largest WAL over the run: ${fixed(overallMax / MiB, 1)} MiB after ${total} tasks`);
  if (server.errors.length > 0)
    console.log(`server reported ${server.errors.length} error(s): ${server.errors[0]!.message}`);
} finally {
  clearInterval(sampler);
  await server.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

/** `count` tasks created and finished on the store directly; the WAL sampler gets a turn between tasks. */
async function direct(count: number, offset: number) {
  const latencies: number[] = [];
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    const begin = performance.now();
    const taskId = `direct-${offset + i}`;
    const now = Date.now();
    const { task } = await store.create({
      taskId,
      principal: 'bench',
      toolName: ECHO_TOOL,
      arguments: ECHO_ARGUMENTS,
      createdAt: now,
      ttlMs: 3_600_000,
      pollIntervalMs: 1000,
      resumable: false,
      leaseHolder: 'bench',
      leaseExpiresAt: now + 60_000,
    });
    await store.finish({ taskId, fence: task.fence }, { status: 'completed', result: { content: [] } }, now);
    latencies.push(performance.now() - begin);
    if (i % 50 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  const elapsedMs = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return {
    requests: count,
    throughput: (count / elapsedMs) * 1000,
    p99Ms: percentile(latencies, 99),
    failures: 0,
    firstFailure: undefined as string | undefined,
  };
}
