/**
 * Benchmark 14 (bench/RESULTS.md section 14): a client fleet on one PostgreSQL ledger. Three worker processes
 * (TaskClients in `fleet` mode, each taking over what the others stop renewing) share one ledger on an embedded
 * PostgreSQL and follow N tasks of one clockwork server (the server of benchmarks 3 to 5, which counts every tasks/get
 * per task): each submits a third, then the tasks are released and complete at offsets spread over `--spread-ms`.
 * Half-way through, one worker is SIGKILLed; the two survivors take over its open records once its leases run out and
 * follow them to the end. Measured: tasks/get per task against the ideal ceil(duration / pollIntervalMs) (duration:
 * creation to completion), tasks polled well beyond it (a record two workers poll at once would be), tasks/get after
 * the client knew the task terminal, each worker's CPU, and the time from the kill until the survivors had re-queried
 * every record the dead worker left open.
 *
 *   node dist/bench/bench/clientFleet.js [--smoke] [--tasks 10000] [--poll-ms 10000] [--spread-ms 60000]
 *     [--lease-ms 5000]
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { PostgresLedger } from 'closeout/client';

import { startPostgres } from '../test/support/postgres.js';
import { startClockworkServer } from './clockworkServer.js';
import { fixed, machineLine, median, percentile, table } from './figures.js';
import { positive } from './flags.js';
import { type FollowClientConfig, type FollowClientProcess, startFollowClient } from './followClient.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    'poll-ms': { type: 'string' },
    'spread-ms': { type: 'string' },
    'lease-ms': { type: 'string' },
  },
});
const taskCount = positive(flags.tasks, flags.smoke ? 60 : 10_000);
const pollMs = positive(flags['poll-ms'], flags.smoke ? 300 : 10_000);
const spreadMs = positive(flags['spread-ms'], flags.smoke ? 3_000 : 60_000);
const leaseMs = positive(flags['lease-ms'], flags.smoke ? 2_000 : 5_000);
const WORKERS = 3;
/**
 * Calls and polls in flight per worker: the scheduler's default 8 polls, and as many calls. More than the ledger's
 * pooled connections together: they wait their turn, and the lease renewals have a connection of their own (a pool
 * of 5 that failed calls waiting past 5 s stopped the first 10,000-task run; RESULTS.md section 14).
 */
const SUBMIT_CONCURRENCY = 8;
const MAX_CONCURRENT_POLLS = 8;
/** How often each worker looks for records whose lease ran out. */
const takeOverEveryMs = Math.max(100, Math.round(leaseMs / 5));
/** Beyond this many tasks/get over the ideal, a task counts as over-polled: one worker's polls stay within it. */
const OVER_POLL_MARGIN = 2;
const DEADLINE_MS = spreadMs + 10 * leaseMs + 300_000;

const postgres = await startPostgres();
const server = await startClockworkServer(pollMs);
const workers: FollowClientProcess[] = [];
try {
  console.log(`clientFleet · ${machineLine()}`);
  console.log(
    `${WORKERS} worker processes on one PostgreSQL ledger following ${taskCount} tasks (pollIntervalMs ${pollMs} ms, ` +
      `completions spread over ${spreadMs} ms after the release); lease ${leaseMs} ms, take-over every ` +
      `${takeOverEveryMs} ms; worker 0 SIGKILLed ${spreadMs / 2} ms after the release`,
  );
  const database = await postgres.createDatabase();
  const offsets = Array.from({ length: taskCount }, (_, i) => Math.round(((i + 0.5) / taskCount) * spreadMs));
  const configOf = (index: number): FollowClientConfig => ({
    kind: 'closeout',
    mode: 'fleet',
    url: server.url,
    group: `worker-${index}`,
    // worker i submits every third offset: each worker's share completes over the whole spread
    offsetsMs: offsets.filter((_, i) => i % WORKERS === index),
    ledgerPath: database.connectionString,
    leaseMs,
    takeOverEveryMs,
    submitConcurrency: SUBMIT_CONCURRENCY,
    maxConcurrentPolls: MAX_CONCURRENT_POLLS,
  });
  for (let index = 0; index < WORKERS; index++) workers.push(startFollowClient(configOf(index)));
  await Promise.all(workers.map((worker) => worker.next('ready')));
  const submitStart = Date.now();
  const submitted = await Promise.all(workers.map((worker) => worker.next('submitted')));
  console.log(
    `submitted ${taskCount} tasks in ${fixed(Date.now() - submitStart)} ms (${WORKERS} workers, ${SUBMIT_CONCURRENCY} calls in flight each)`,
  );

  const releasedAt = server.release();
  await sleep(spreadMs / 2);
  const [doomed, ...survivors] = workers as [FollowClientProcess, ...FollowClientProcess[]];
  const doomedCpu = await doomed.sample();
  await doomed.kill();
  const killedAt = Date.now();
  // the dead worker's records still open: its tasks whose terminal answer it never had
  const orphans = [...server.tasks.values()].filter(
    (task) => task.group === 'worker-0' && task.terminalAnsweredAt === undefined,
  );
  const requeriedAt = new Map<string, number>();
  for (;;) {
    for (const task of orphans) {
      if (!requeriedAt.has(task.taskId) && task.lastGetAt !== undefined && task.lastGetAt > killedAt) {
        requeriedAt.set(task.taskId, task.lastGetAt);
      }
    }
    if (requeriedAt.size === orphans.length) break;
    if (Date.now() - killedAt > DEADLINE_MS) {
      throw new Error(`${orphans.length - requeriedAt.size} records of the dead worker not re-queried in time`);
    }
    await sleep(10);
  }
  const requeries = [...requeriedAt.values()].sort((a, b) => a - b);

  // every task closed out: the server gave each its terminal answer and the ledger holds no open record
  const ledger = await PostgresLedger.open(database.connectionString, { maxConnections: 1 });
  let open = Number.NaN;
  try {
    for (;;) {
      const answered = [...server.tasks.values()].every((task) => task.terminalAnsweredAt !== undefined);
      if (answered) {
        open = (await ledger.list({ localStates: ['submitting', 'tracking', 'detached'] })).length;
        if (open === 0) break;
      }
      if (Date.now() - releasedAt > DEADLINE_MS) break;
      await sleep(500);
    }
  } finally {
    await ledger.dispose();
  }
  const finishedAt = Date.now();
  const survivorCpu = await Promise.all(survivors.map((worker) => worker.sample()));

  const tasks = [...server.tasks.values()];
  const ideal = (task: (typeof tasks)[number]) =>
    Math.max(1, Math.ceil((task.completeAt! - task.createdAt) / server.pollIntervalMs));
  const ratios = (pick: (task: (typeof tasks)[number]) => boolean) =>
    tasks
      .filter(pick)
      .map((task) => task.gets / ideal(task))
      .sort((a, b) => a - b);
  const overPolled = (pick: (task: (typeof tasks)[number]) => boolean) =>
    tasks.filter((task) => pick(task) && task.gets > ideal(task) + OVER_POLL_MARGIN).length;
  const survivorsOwn = (task: (typeof tasks)[number]) => task.group !== 'worker-0';
  const doomedOwn = (task: (typeof tasks)[number]) => task.group === 'worker-0';

  console.log('');
  console.log(
    table(
      ['worker', 'tasks', 'submit CPU µs/task', 'follow CPU ms', 'follow, % of one core', 'RSS MB'],
      workers.map((_, index) => {
        const cpu = index === 0 ? doomedCpu : survivorCpu[index - 1]!;
        const followEnd = index === 0 ? killedAt : finishedAt;
        const followCpuMs = (cpu.cpuTotalUs - submitted[index]!.cpuTotalUs) / 1000;
        return [
          `worker ${index}${index === 0 ? ' (killed)' : ''}`,
          String(configOf(index).offsetsMs.length),
          fixed(submitted[index]!.cpuUs / configOf(index).offsetsMs.length),
          fixed(followCpuMs),
          fixed((followCpuMs / Math.max(1, followEnd - releasedAt)) * 100, 1),
          fixed(cpu.rssBytes / 2 ** 20),
        ];
      }),
    ),
  );
  console.log('');
  const survivorRatios = ratios(survivorsOwn);
  const doomedRatios = ratios(doomedOwn);
  console.log(
    table(
      ['figure', 'value'],
      [
        ["tasks/get per task over ideal, survivors' own, median", fixed(median(survivorRatios), 2)],
        ["tasks/get per task over ideal, survivors' own, p99", fixed(percentile(survivorRatios, 99), 2)],
        ["tasks/get per task over ideal, killed worker's, median", fixed(median(doomedRatios), 2)],
        ["tasks/get per task over ideal, killed worker's, p99", fixed(percentile(doomedRatios, 99), 2)],
        [`survivors' own tasks polled > ideal + ${OVER_POLL_MARGIN}`, String(overPolled(survivorsOwn))],
        [`killed worker's tasks polled > ideal + ${OVER_POLL_MARGIN}`, String(overPolled(doomedOwn))],
        [
          "tasks/get after terminal, survivors' own",
          String(tasks.filter(survivorsOwn).reduce((n, task) => n + task.getsAfterTerminal, 0)),
        ],
        // the dead worker may have had a terminal answer it had not recorded yet: a survivor asks once more
        [
          "tasks/get after terminal, killed worker's",
          String(tasks.filter(doomedOwn).reduce((n, task) => n + task.getsAfterTerminal, 0)),
        ],
        ['records left open (must be 0)', String(open)],
        [`killed worker's open records at the kill`, String(orphans.length)],
        ['kill to first re-query by a survivor, ms', fixed((requeries[0] ?? killedAt) - killedAt)],
        [`kill to all ${orphans.length} re-queried, ms`, fixed((requeries.at(-1) ?? killedAt) - killedAt)],
        ['re-query span after the leases ran out, ms', fixed((requeries.at(-1) ?? 0) - (requeries[0] ?? 0))],
      ],
    ),
  );
} finally {
  await Promise.allSettled(workers.map((worker) => worker.kill()));
  await server.close();
  await postgres.stop();
}
