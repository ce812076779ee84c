/**
 * Benchmarks 3 and 4 (issue 6): one client following many concurrently open tasks. A clockwork server (in this
 * process) holds every task `working` until all clients have submitted theirs, then completes each at a random
 * offset; each client runs in a process of its own, so its CPU and memory are its own.
 *   3  Closeout's TaskClient (SQLite ledger) following N = 1,000 and N = 10,000 tasks;
 *   4  the official @modelcontextprotocol/ext-tasks 0.2.2 client following 1,000 tasks with the same offsets,
 *      in the same run as the TaskClient's 1,000 (both at once, on the same server).
 * Per client: CPU per task (submitting, following), CPU while following as a share of one core and per poll, peak
 * RSS over the connected baseline, tasks/get per task against the ideal (duration / pollIntervalMs + 1, duration =
 * creation to completion), tasks/get after the client was told the task was terminal, and the lateness of each
 * close-out behind the server's completion. Runs of 1,000 are repeated (medians); the 10,000 run is one run.
 *
 *   node dist/bench/bench/clientFollow.js [--smoke] [--rounds 3] [--small 1000] [--large 10000]
 *     [--small-poll-ms 5000] [--large-poll-ms 30000]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { type ClockworkServer, startClockworkServer } from './clockworkServer.js';
import { fixed, machineLine, median, percentile, table } from './figures.js';
import { type FollowClientConfig, type FollowClientMessage, startFollowClient } from './followClient.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    small: { type: 'string' },
    large: { type: 'string' },
    'small-poll-ms': { type: 'string' },
    'large-poll-ms': { type: 'string' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const rounds = positive(flags.rounds, flags.smoke ? 1 : 3);
const small = positive(flags.small, flags.smoke ? 20 : 1000);
const large = positive(flags.large, flags.smoke ? 50 : 10_000);
const smallPollMs = positive(flags['small-poll-ms'], flags.smoke ? 300 : 5000);
const largePollMs = positive(flags['large-poll-ms'], flags.smoke ? 300 : 30_000);
const SUBMIT_CONCURRENCY = 32;

interface ClientFigures {
  tasks: number;
  submitMs: number;
  submitCpuUsPerTask: number;
  followCpuUsPerTask: number;
  followCorePercent: number;
  cpuUsPerPoll: number;
  extraRssMb: number;
  pollsPerTask: number;
  /** The formula: duration / pollIntervalMs + 1. */
  idealPollsPerTask: number;
  /** Polling exactly every pollIntervalMs from creation: ceil(duration / pollIntervalMs). */
  exactPollsPerTask: number;
  pollsAfterTerminal: number;
  latenessP50Ms: number;
  latenessP99Ms: number;
  notCompleted: number;
}

/** Offsets in [0, spreadMs), the same for every client of a run (mulberry32, fixed seed). */
function offsets(count: number, spreadMs: number, seed = 6): number[] {
  let state = seed >>> 0;
  return Array.from({ length: count }, () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * spreadMs);
  });
}

/** One run: every client submits its tasks, the server releases them, every client follows them to the end. */
async function run(
  dir: string,
  pollIntervalMs: number,
  clients: Pick<FollowClientConfig, 'kind' | 'group'>[],
  count: number,
): Promise<Map<string, ClientFigures>> {
  const server: ClockworkServer = await startClockworkServer(pollIntervalMs);
  const plan = offsets(count, 2 * pollIntervalMs);
  const processes = clients.map((client) =>
    startFollowClient({
      ...client,
      mode: 'follow',
      url: server.url,
      offsetsMs: plan,
      ledgerPath: join(dir, `${client.group}.ledger.db`),
      submitConcurrency: SUBMIT_CONCURRENCY,
    }),
  );
  try {
    const ready = await Promise.all(processes.map((p) => p.next('ready')));
    const submitted = await Promise.all(processes.map((p) => p.next('submitted')));
    server.release();
    const done = await Promise.all(processes.map((p) => p.next('done')));
    const figures = new Map<string, ClientFigures>();
    clients.forEach((client, i) => {
      figures.set(client.group, summarize(server, client.group, ready[i]!, submitted[i]!, done[i]!, count));
    });
    return figures;
  } finally {
    await Promise.all(processes.map((p) => p.kill()));
    await server.close();
  }
}

function summarize(
  server: ClockworkServer,
  group: string,
  ready: Extract<FollowClientMessage, { type: 'ready' }>,
  submitted: Extract<FollowClientMessage, { type: 'submitted' }>,
  done: Extract<FollowClientMessage, { type: 'done' }>,
  count: number,
): ClientFigures {
  const tasks = [...server.tasks.values()].filter((task) => task.group === group);
  const polls = tasks.reduce((n, task) => n + task.gets, 0);
  const ideal = tasks.reduce((n, task) => n + (task.completeAt! - task.createdAt) / server.pollIntervalMs + 1, 0);
  const exact = tasks.reduce(
    (n, task) => n + Math.ceil((task.completeAt! - task.createdAt) / server.pollIntervalMs),
    0,
  );
  const lateness = tasks
    .map((task) => (done.closedAt[task.taskId] ?? Number.NaN) - task.completeAt!)
    .sort((x, y) => x - y);
  return {
    tasks: tasks.length,
    submitMs: submitted.submitMs,
    submitCpuUsPerTask: submitted.cpuUs / count,
    followCpuUsPerTask: done.cpuUs / count,
    followCorePercent: (done.cpuUs / 1000 / done.followMs) * 100,
    cpuUsPerPoll: done.cpuUs / polls,
    extraRssMb: (done.maxRssBytes - ready.rssBytes) / 2 ** 20,
    pollsPerTask: polls / tasks.length,
    idealPollsPerTask: ideal / tasks.length,
    exactPollsPerTask: exact / tasks.length,
    pollsAfterTerminal: tasks.reduce((n, task) => n + task.getsAfterTerminal, 0),
    latenessP50Ms: percentile(lateness, 50),
    latenessP99Ms: percentile(lateness, 99),
    notCompleted: done.notCompleted + (count - tasks.length),
  };
}

const medianOf = (runs: ClientFigures[], pick: (f: ClientFigures) => number) => median(runs.map(pick));

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-follow-'));
try {
  console.log(`clientFollow · ${machineLine()}`);
  console.log(
    `${small} tasks per client (TaskClient and ext-tasks at once, pollIntervalMs ${smallPollMs}, ${rounds} round(s)), ` +
      `then ${large} tasks on one TaskClient (pollIntervalMs ${largePollMs}, one run); completions spread over 2 poll intervals`,
  );
  const smallRuns = { closeout: [] as ClientFigures[], ext: [] as ClientFigures[] };
  for (let round = 0; round < rounds; round++) {
    const figures = await run(
      dir,
      smallPollMs,
      [
        { kind: 'closeout', group: `closeout-${round}` },
        { kind: 'ext-tasks', group: `ext-${round}` },
      ],
      small,
    );
    smallRuns.closeout.push(figures.get(`closeout-${round}`)!);
    smallRuns.ext.push(figures.get(`ext-${round}`)!);
  }
  const largeRun = (await run(dir, largePollMs, [{ kind: 'closeout', group: 'closeout-large' }], large)).get(
    'closeout-large',
  )!;

  const columns: [string, ClientFigures[]][] = [
    [`TaskClient ${small}`, smallRuns.closeout],
    [`ext-tasks ${small}`, smallRuns.ext],
    [`TaskClient ${large}`, [largeRun]],
  ];
  const rows: [string, (f: ClientFigures) => number, number][] = [
    ['submit, wall ms', (f) => f.submitMs, 0],
    ['submit, client CPU µs/task', (f) => f.submitCpuUsPerTask, 0],
    ['follow, client CPU µs/task', (f) => f.followCpuUsPerTask, 0],
    ['follow, % of one core', (f) => f.followCorePercent, 1],
    ['follow, client CPU µs/poll', (f) => f.cpuUsPerPoll, 0],
    ['peak RSS over baseline, MB', (f) => f.extraRssMb, 1],
    ['tasks/get per task', (f) => f.pollsPerTask, 2],
    ['ideal per task, d/P + 1', (f) => f.idealPollsPerTask, 2],
    ['ideal per task, ceil(d/P)', (f) => f.exactPollsPerTask, 2],
    ['tasks/get after terminal', (f) => f.pollsAfterTerminal, 0],
    ['close-out lateness p50, ms', (f) => f.latenessP50Ms, 0],
    ['close-out lateness p99, ms', (f) => f.latenessP99Ms, 0],
    ['tasks not closed out completed', (f) => f.notCompleted, 0],
  ];
  console.log('');
  console.log(
    table(
      ['median over runs', ...columns.map(([name]) => name)],
      rows.map(([label, pick, digits]) => [label, ...columns.map(([, runs]) => fixed(medianOf(runs, pick), digits))]),
    ),
  );

  // the targets, each a line
  const c = (pick: (f: ClientFigures) => number) => medianOf(smallRuns.closeout, pick);
  const e = (pick: (f: ClientFigures) => number) => medianOf(smallRuns.ext, pick);
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT MET');
  // against polling exactly every interval from creation (d/P + 1 counts one poll more than that, on average half)
  const pollRatio = largeRun.pollsPerTask / largeRun.exactPollsPerTask;
  console.log('');
  console.log(
    table(
      ['target', 'measured', ''],
      [
        [
          `${large} tasks: extra RSS < 100 MB`,
          `${fixed(largeRun.extraRssMb, 1)} MB`,
          verdict(largeRun.extraRssMb < 100),
        ],
        [
          `${large} tasks: < 5% of one core while following`,
          `${fixed(largeRun.followCorePercent, 1)}%`,
          verdict(largeRun.followCorePercent < 5),
        ],
        [
          `${large} tasks: 0 polls after terminal`,
          fixed(largeRun.pollsAfterTerminal),
          verdict(largeRun.pollsAfterTerminal === 0),
        ],
        [
          `${large} tasks: polls within 10% of ideal`,
          `x${fixed(pollRatio, 2)}`,
          verdict(Math.abs(pollRatio - 1) <= 0.1),
        ],
        [
          `vs ext-tasks: CPU per task no more`,
          `${fixed(c((f) => f.submitCpuUsPerTask + f.followCpuUsPerTask))} vs ${fixed(e((f) => f.submitCpuUsPerTask + f.followCpuUsPerTask))} µs`,
          verdict(
            c((f) => f.submitCpuUsPerTask + f.followCpuUsPerTask) <=
              e((f) => f.submitCpuUsPerTask + f.followCpuUsPerTask),
          ),
        ],
        [
          `vs ext-tasks: memory no more`,
          `${fixed(
            c((f) => f.extraRssMb),
            1,
          )} vs ${fixed(
            e((f) => f.extraRssMb),
            1,
          )} MB`,
          verdict(c((f) => f.extraRssMb) <= e((f) => f.extraRssMb)),
        ],
        [
          `vs ext-tasks: polls per task no more`,
          `${fixed(
            c((f) => f.pollsPerTask),
            2,
          )} vs ${fixed(
            e((f) => f.pollsPerTask),
            2,
          )}`,
          verdict(c((f) => f.pollsPerTask) <= e((f) => f.pollsPerTask)),
        ],
        [
          `vs ext-tasks: lateness within one interval`,
          `${fixed(c((f) => f.latenessP50Ms))} vs ${fixed(e((f) => f.latenessP50Ms))} ms`,
          verdict(c((f) => f.latenessP50Ms) <= e((f) => f.latenessP50Ms) + smallPollMs),
        ],
      ],
    ),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
