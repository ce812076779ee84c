/**
 * Benchmark 5a (bench/RESULTS.md section 5a): how fast a restarted TaskClient takes up its open tasks. A TaskClient
 * process submits N tasks that stay `working` (clockwork server, never released), records them in its SQLite ledger and
 * is SIGKILLed. Once its leases have lapsed, a new process opens the same ledger and calls `resumeAll()`; measured from
 * that process's start: when `resumeAll()` returned, and when the server had seen a tasks/get for every one of the N
 * tasks. Each round kills the resuming process and resumes again from the same ledger. Then as many rounds of the
 * floor: a fresh process with the SDK alone reads the open taskIds from the same ledger and re-queries each.
 *
 * `--profile DIR` also writes the inspector's CPU profile of each resuming process, from just after its start until every
 * task was re-queried (one `.cpuprofile` per round).
 *
 *   node dist/bench/bench/clientResume.js [--smoke] [--tasks 10000] [--rounds 3] [--profile DIR]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { startClockworkServer } from './clockworkServer.js';
import { fixed, machineLine, median, table } from './figures.js';
import { positive } from './flags.js';
import { type FollowClientConfig, startFollowClient } from './followClient.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    rounds: { type: 'string' },
    profile: { type: 'string' },
  },
});
const taskCount = positive(flags.tasks, flags.smoke ? 50 : 10_000);
const rounds = positive(flags.rounds, flags.smoke ? 1 : 3);
/** Long enough that nothing is polled between the submission and the kill. */
const POLL_INTERVAL_MS = 10 * 60_000;
/**
 * The killed submitter's short leases, so a resume need not wait long for them to lapse. The resuming processes keep
 * the TaskClient's default lease: a 1 s lease of their own would make them renew three times a second and read every
 * record's lease again a third of a second after claiming it, which is that lease's cost, not a resume's.
 */
const LEASE_MS = 1000;
const DEADLINE_MS = 120_000;

interface RoundFigures {
  resumeAllMs: number;
  allRequeriedMs: number;
  requeryPerSecond: number;
  duplicates: number;
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-resume-'));
const server = await startClockworkServer(POLL_INTERVAL_MS);
try {
  console.log(`clientResume · ${machineLine()}`);
  console.log(
    `${taskCount} open records in one SQLite ledger, left by a SIGKILLed TaskClient; ${rounds} resume(s), ` +
      `each by a fresh process (default lease) after the submitter's leases (${LEASE_MS} ms) lapsed`,
  );
  const base: FollowClientConfig = {
    kind: 'closeout',
    mode: 'submit',
    url: server.url,
    group: 'resume',
    offsetsMs: Array.from({ length: taskCount }, () => 0),
    ledgerPath: join(dir, 'ledger.db'),
    leaseMs: LEASE_MS,
    submitConcurrency: 32,
  };
  // the server's own rate, for the target: a cheap raw client asking as fast as 16 requests in flight allow
  const floorProcess = startFollowClient({
    ...base,
    mode: 'floor',
    group: 'floor',
    floorRequests: flags.smoke ? 150 : 3000,
    // the server's rate and the SDK's cost per request are all this benchmark takes from the floor
    floorUnpaced: true,
  });
  const { rawPerSecond, sdkCpuUsPerRequest } = await floorProcess.next('floor');
  await floorProcess.kill();
  console.log(`server rate: ${fixed(rawPerSecond)} tasks/get per second to a raw HTTP client (16 in flight)`);
  // one client process sends every re-query through the SDK's Client.request: its CPU per request is a floor
  const sdkFloorMs = (taskCount * sdkCpuUsPerRequest) / 1000;
  console.log(
    `the SDK's Client.request alone: ${fixed(sdkCpuUsPerRequest)} µs of client CPU per tasks/get, ` +
      `${fixed(sdkFloorMs)} ms for ${taskCount} on one core`,
  );
  const submitter = startFollowClient(base);
  // the tasks this benchmark resumes (the floor process made one of its own on the same server)
  const resumedTasks = () => [...server.tasks.values()].filter((task) => task.group === base.group);
  const { submitMs } = await submitter.next('submitted');
  await submitter.kill();
  console.log(`submitted ${taskCount} tasks in ${fixed(submitMs)} ms, then SIGKILL`);

  /** One resume by a fresh process of `kind` (the TaskClient, or the SDK alone as the floor). */
  const resumeOnce = async (kind: 'closeout' | 'sdk', round: number): Promise<RoundFigures> => {
    await sleep(LEASE_MS + 500);
    for (const task of resumedTasks()) {
      task.gets = 0;
      task.firstGetAt = undefined;
    }
    const spawnedAt = Date.now();
    const { leaseMs: _submitterLease, ...resumerBase } = base;
    const resumer = startFollowClient({ ...resumerBase, kind, mode: 'resume', offsetsMs: [] });
    try {
      const resumed = resumer.next('resumed');
      const profiled = flags.profile !== undefined && kind === 'closeout';
      if (profiled) await resumer.profile('start');
      let lastFirstGet = 0;
      let firstGet = Number.POSITIVE_INFINITY;
      for (;;) {
        let missing = 0;
        for (const task of resumedTasks()) {
          if (task.firstGetAt === undefined) missing++;
          else {
            lastFirstGet = Math.max(lastFirstGet, task.firstGetAt);
            firstGet = Math.min(firstGet, task.firstGetAt);
          }
        }
        if (missing === 0) break;
        if (Date.now() - spawnedAt > DEADLINE_MS)
          throw new Error(`${missing} tasks not re-queried after ${DEADLINE_MS} ms`);
        await sleep(10);
      }
      const { sinceStartMs, resumed: count } = await resumed;
      if (profiled) await resumer.profile('stop', join(flags.profile!, `resume-${round}.cpuprofile`));
      if (count !== taskCount) throw new Error(`the ${kind} resume took up ${count} of ${taskCount} records`);
      return {
        resumeAllMs: sinceStartMs,
        allRequeriedMs: lastFirstGet - spawnedAt,
        requeryPerSecond: (taskCount / Math.max(1, lastFirstGet - firstGet)) * 1000,
        duplicates: resumedTasks().reduce((n, task) => n + Math.max(0, task.gets - 1), 0),
      };
    } finally {
      await resumer.kill();
    }
  };
  const figures: RoundFigures[] = [];
  for (let round = 0; round < rounds; round++) figures.push(await resumeOnce('closeout', round));
  // the floor, after the TaskClient's rounds (it writes nothing): the same re-queries through the SDK alone
  const floorFigures: RoundFigures[] = [];
  for (let round = 0; round < rounds; round++) floorFigures.push(await resumeOnce('sdk', round));
  const col = (pick: (f: RoundFigures) => number, digits = 0) => fixed(median(figures.map(pick)), digits);
  console.log('');
  console.log(
    table(
      ['median over resumes', ''],
      [
        ['process start to resumeAll() returned, ms', col((f) => f.resumeAllMs)],
        [`process spawn to all ${taskCount} re-queried, ms`, col((f) => f.allRequeriedMs)],
        ['re-query rate, tasks/s', col((f) => f.requeryPerSecond)],
        ['tasks/get beyond one per task (must be 0)', col((f) => f.duplicates)],
        [
          `(floor) the SDK alone: process spawn to all ${taskCount} re-queried, ms`,
          fixed(median(floorFigures.map((f) => f.allRequeriedMs))),
        ],
      ],
    ),
  );
  const allowedMs = 2000 + (taskCount / rawPerSecond) * 1000;
  const measuredMs = median(figures.map((f) => f.allRequeriedMs));
  const floorMs = median(floorFigures.map((f) => f.allRequeriedMs));
  console.log('');
  console.log(
    table(
      ['target', 'allowed', 'measured', ''],
      [
        [
          `all ${taskCount} re-queried within 2 s + N / server rate`,
          `${fixed(allowedMs)} ms`,
          `${fixed(measuredMs)} ms`,
          measuredMs <= allowedMs ? 'met' : 'NOT MET',
        ],
        [
          `(floor) ${taskCount} tasks/get through the SDK alone, client CPU`,
          '',
          `${fixed(sdkFloorMs)} ms`,
          sdkFloorMs <= allowedMs ? 'fits the allowance' : 'over the allowance alone',
        ],
        [
          `(floor) the SDK alone resuming: spawn, one SELECT, ${taskCount} tasks/get`,
          '',
          `${fixed(floorMs)} ms`,
          floorMs <= allowedMs ? 'fits the allowance' : 'over the allowance alone',
        ],
      ],
    ),
  );
} finally {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}
