/**
 * Benchmark 5 (issue 11, item 9): the SQLite task store's write-ahead log under sustained load. Closeout over loopback
 * HTTP answers `tools/call` with CreateTaskResults back to back (each a synced commit, then the handler's result
 * committed too) for `--seconds`, in windows of `--requests`; after each window the table shows the throughput of that
 * window, its p99, the largest WAL seen during it (sampled every 100 ms) and the database file's size. A bounded WAL
 * is a flat "WAL max" column while the database grows with the tasks it retains.
 *
 *   node dist/bench/bench/walGrowth.js [--smoke] [--seconds 180] [--requests 4000] [--concurrency 16]
 */
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { SqliteTaskStore } from 'closeout/server';

import { fixed, machineLine, table } from './figures.js';
import { runLoad } from './loadGenerator.js';
import { ECHO_ARGUMENTS, ECHO_TOOL, startCloseoutServer } from './servers.js';
import { wireRequest } from './wire.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    seconds: { type: 'string' },
    requests: { type: 'string' },
    concurrency: { type: 'string' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const seconds = positive(flags.seconds, flags.smoke ? 3 : 180);
const requests = positive(flags.requests, flags.smoke ? 200 : 4000);
const concurrency = positive(flags.concurrency, flags.smoke ? 4 : 16);
const MiB = 1024 * 1024;

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-wal-'));
const path = join(dir, 'tasks.db');
const size = (file: string) => (existsSync(file) ? statSync(file).size : 0);
const store = new SqliteTaskStore(path);
const server = await startCloseoutServer(store);
let walMax = 0;
const sampler = setInterval(() => (walMax = Math.max(walMax, size(`${path}-wal`))), 100);

try {
  console.log(`walGrowth · ${machineLine()}`);
  console.log(
    `tools/call -> CreateTaskResult on SQLite (defaults: synchronous full, background checkpoints), ${concurrency} in flight, windows of ${requests} requests for ${seconds} s`,
  );
  const request = wireRequest('tools/call', { name: ECHO_TOOL, arguments: ECHO_ARGUMENTS }, { declareTasks: true });
  const rows: string[][] = [];
  const started = Date.now();
  let total = 0;
  let overallMax = 0;
  // bounded: by time, and by a count of windows
  for (let window = 0; Date.now() - started < seconds * 1000 && window < 10_000; window++) {
    walMax = size(`${path}-wal`);
    const result = await runLoad({
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
