/**
 * A narrow harness for the waiting client's target (bench/RESULTS.md sections 3 and 4): the client CPU of one poll of a
 * waiting task, and nothing else.
 * One TaskClient (a process of its own, bench/followClient.ts) submits `--tasks` tasks to the clockwork server, which
 * keeps them `working` for good; after one poll interval of warm-up, the client's CPU over `--window-ms` is divided by
 * the tasks/get the server answered it in that window. The same measure as clientFollow's "waiting, client CPU
 * µs/poll", at a chosen poll rate and in seconds rather than minutes, so old and new code can be run back to back.
 * `--profile DIR` also writes the inspector's CPU profile of the window (one `.cpuprofile` per run; the profiler's own
 * sampling costs CPU, so figures of a profiled run are not comparable to others). `--fast-path on|off|both` polls on
 * the client's fast path (taskGetFastPath.ts), through the SDK alone, or alternates the two, run by run.
 * `--promoted DIR` writes a `.heapprofile` of the window's allocations that outlived the young generation (what grows
 * the old generation between V8's full collections, and so the peak RSS; bench/RESULTS.md, section 26).
 * `--argument-bytes 40,16384` gives every call a `padding` argument of each size in turn, run by run: what a waiting
 * poll costs as what the calls carry grows (the ledger keeps the arguments in the record; bench/RESULTS.md, section 33).
 *
 *   node dist/bench/bench/clientPollCost.js [--tasks 2000] [--poll-ms 6000] [--window-ms 12000] [--runs 3]
 *     [--fast-path on|off|both] [--argument-bytes N[,N...]] [--profile DIR] [--promoted DIR]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { type ClockworkServer, startClockworkServer } from './clockworkServer.js';
import { fixed, machineLine, median } from './figures.js';
import { positive } from './flags.js';
import { startFollowClient } from './followClient.js';

const { values: flags } = parseArgs({
  options: {
    tasks: { type: 'string' },
    'poll-ms': { type: 'string' },
    'window-ms': { type: 'string' },
    runs: { type: 'string' },
    profile: { type: 'string' },
    promoted: { type: 'string' },
    'fast-path': { type: 'string' },
    'argument-bytes': { type: 'string' },
  },
});
const fastPathModes = { on: [true], off: [false], both: [true, false] }[flags['fast-path'] ?? 'on'];
if (!fastPathModes) throw new Error(`--fast-path takes on, off or both (got ${flags['fast-path']})`);
const tasks = positive(flags.tasks, 2000);
const pollMs = positive(flags['poll-ms'], 6000);
const windowMs = positive(flags['window-ms'], 12_000);
const runs = positive(flags.runs, 3);
const argumentSizes = (flags['argument-bytes'] ?? '0').split(',').map((size) => {
  const bytes = Number(size);
  if (!Number.isInteger(bytes) || bytes < 0) throw new Error(`--argument-bytes takes sizes in bytes (got ${size})`);
  return bytes;
});

const gets = (server: ClockworkServer) => [...server.tasks.values()].reduce((n, task) => n + task.gets, 0);

/** Client CPU µs per tasks/get over the window, and the polls it made per second. */
async function once(
  dir: string,
  run: number,
  pollFastPath: boolean,
  argumentBytes: number,
): Promise<{ cpuUsPerPoll: number; pollsPerSecond: number }> {
  const server = await startClockworkServer(pollMs);
  const client = startFollowClient({
    kind: 'closeout',
    mode: 'follow',
    url: server.url,
    group: `poll-cost-${run}`,
    offsetsMs: Array.from({ length: tasks }, () => 0),
    ledgerPath: join(dir, `poll-cost-${run}.ledger.db`),
    submitConcurrency: 32,
    pollFastPath,
    argumentBytes,
  });
  try {
    await client.next('ready');
    await client.next('submitted');
    // every task polled once at least after its submission: the window sees the steady state only
    await sleep(pollMs * 1.2);
    if (flags.profile !== undefined) await client.profile('start');
    if (flags.promoted !== undefined) await client.profile('start', undefined, 'promoted');
    const before = await client.sample();
    const getsBefore = gets(server);
    const startedAt = performance.now();
    await sleep(windowMs);
    const after = await client.sample();
    const polls = gets(server) - getsBefore;
    const elapsedMs = performance.now() - startedAt;
    if (flags.profile !== undefined) await client.profile('stop', join(flags.profile, `pollCost-${run}.cpuprofile`));
    if (flags.promoted !== undefined) {
      await client.profile('stop', join(flags.promoted, `pollCost-${run}.heapprofile`), 'promoted');
    }
    return {
      cpuUsPerPoll: (after.cpuTotalUs - before.cpuTotalUs) / Math.max(1, polls),
      pollsPerSecond: (polls / elapsedMs) * 1000,
    };
  } finally {
    await client.kill();
    await server.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-poll-cost-'));
try {
  console.log(`clientPollCost · ${machineLine()}`);
  console.log(`${tasks} waiting tasks, pollIntervalMs ${pollMs}, window ${windowMs} ms, ${runs} run(s)`);
  const modes = fastPathModes.flatMap((pollFastPath) =>
    argumentSizes.map((argumentBytes) => ({ pollFastPath, argumentBytes })),
  );
  const label = ({ pollFastPath, argumentBytes }: (typeof modes)[number]) =>
    `${pollFastPath ? 'fast path' : 'SDK path'}${argumentSizes.length > 1 ? `, arguments +${argumentBytes} B` : ''}`;
  const results = new Map(modes.map((mode) => [mode, [] as { cpuUsPerPoll: number; pollsPerSecond: number }[]]));
  for (let run = 0; run < runs; run++) {
    for (const mode of modes) {
      const result = await once(dir, run, mode.pollFastPath, mode.argumentBytes);
      results.get(mode)!.push(result);
      console.log(
        `run ${run + 1}, ${label(mode)}: ${fixed(result.cpuUsPerPoll, 0)} µs/poll at ${fixed(result.pollsPerSecond, 0)} polls/s`,
      );
    }
  }
  for (const [mode, rows] of results) {
    console.log(`median, ${label(mode)}: ${fixed(median(rows.map((r) => r.cpuUsPerPoll)), 0)} µs/poll`);
  }
  if (argumentSizes.length > 1) {
    for (const pollFastPath of fastPathModes) {
      const perRun = (argumentBytes: number) =>
        results.get(modes.find((m) => m.pollFastPath === pollFastPath && m.argumentBytes === argumentBytes)!)!;
      const [first, ...others] = argumentSizes;
      for (const bytes of others) {
        const ratios = perRun(bytes).map((row, i) => row.cpuUsPerPoll / perRun(first!)[i]!.cpuUsPerPoll);
        console.log(
          `+${bytes} B / +${first} B, ${pollFastPath ? 'fast path' : 'SDK path'}, run by run: ${ratios.map((r) => fixed(r, 2)).join(', ')} (median ${fixed(median(ratios), 2)})`,
        );
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
