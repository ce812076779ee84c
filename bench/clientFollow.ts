/**
 * Benchmarks 3 and 4 (bench/RESULTS.md sections 3 and 4): one client following many concurrently open tasks. A
 * clockwork server (in this process) holds every task `working` until all clients have submitted theirs, then completes
 * each at a random offset; each client runs in a process of its own, so its CPU and memory are its own.
 *   3  Closeout's TaskClient (SQLite ledger) following N = 1,000 and N = 10,000 tasks;
 *   4  the official @modelcontextprotocol/ext-tasks 0.2.2 client following 1,000 tasks with the same offsets,
 *      in the same run as the TaskClient's 1,000 (both at once, on the same server).
 * Every task stays `working` for two more poll intervals after the last submission: that is "waiting" (open tasks,
 * each polled about once an interval, nothing changing), measured on its own. The first interval follows the burst
 * of submissions and is reported alone (the collections of what the burst left, the first poll of each task); the
 * second is the steady state the targets are judged on, as push's waiting client is (bench/pushLateness.ts), each
 * with V8's full collections in it. Then the tasks are released.
 * Per client: CPU per task (submitting, following), CPU while waiting and while following as a share of one core and
 * per poll, peak RSS and RSS while waiting over the connected baseline, tasks/get per task against the ideal
 * (duration / pollIntervalMs + 1, duration = creation to completion), tasks/get after the client was told the task was
 * terminal, and the lateness of each close-out behind the server's completion. Runs of 1,000 are repeated (medians);
 * the 10,000 runs are one run each, with Node's default heap and with `--max-old-space-size` = `--heap-cap-mb`, and a
 * third with the SDK alone following them (bench/followClient.ts, `sdkAloneClient`): the floor under their targets.
 * First, in a process of its own, the floor: what one tasks/get costs a client through the SDK alone, and as raw HTTP.
 *
 *   node dist/bench/bench/clientFollow.js [--smoke] [--rounds 3] [--small 1000] [--large 10000]
 *     [--small-poll-ms 5000] [--large-poll-ms 30000] [--heap-cap-mb 256]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { DEFAULT_POLL_POLICY } from 'closeout/client';

import { pollGridMs } from '../src/client/core/scheduler.js';
import { type ClockworkServer, startClockworkServer } from './clockworkServer.js';
import { fixed, machineLine, median, percentile, table } from './figures.js';
import { positive } from './flags.js';
import { type FollowClientConfig, type FollowClientMessage, startFollowClient } from './followClient.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    small: { type: 'string' },
    large: { type: 'string' },
    'small-poll-ms': { type: 'string' },
    'large-poll-ms': { type: 'string' },
    'heap-cap-mb': { type: 'string' },
  },
});
const rounds = positive(flags.rounds, flags.smoke ? 1 : 3);
const small = positive(flags.small, flags.smoke ? 20 : 1000);
const large = positive(flags.large, flags.smoke ? 50 : 10_000);
const smallPollMs = positive(flags['small-poll-ms'], flags.smoke ? 300 : 5000);
const largePollMs = positive(flags['large-poll-ms'], flags.smoke ? 300 : 30_000);
const heapCapMb = positive(flags['heap-cap-mb'], 256);
const SUBMIT_CONCURRENCY = 32;

interface ClientFigures {
  tasks: number;
  submitMs: number;
  submitCpuUsPerTask: number;
  /** The first interval after the submissions. */
  waitFirstCorePercent: number;
  waitFirstCpuUsPerPoll: number;
  waitFirstMajorGcs: number;
  /** The second: the steady state. */
  waitCorePercent: number;
  waitCpuUsPerPoll: number;
  waitMajorGcs: number;
  waitRssMb: number;
  /** Heap kept while waiting (after a full collection) over the same at the connected baseline. */
  waitLiveHeapMb: number;
  followCpuUsPerTask: number;
  followCorePercent: number;
  cpuUsPerPoll: number;
  /** Peak RSS over the connected baseline: by the end of the submissions, by the release, over the whole run. */
  submitPeakRssMb: number;
  waitPeakRssMb: number;
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
const groupGets = (server: ClockworkServer, group: string) =>
  [...server.tasks.values()].reduce((n, task) => n + (task.group === group ? task.gets : 0), 0);

/** What one client did in one interval of the wait before the release. */
interface WaitWindow {
  cpuUs: number;
  ms: number;
  polls: number;
  majorGcs: number;
}

/** What one client did in the wait before the release: its first interval, then its steady state. */
interface Waiting extends WaitWindow {
  first: WaitWindow;
  rssBytes: number;
  /** The process's peak RSS by the end of the wait (before the release). */
  maxRssBytes: number;
  liveHeapBytes: number;
  releasedCpuTotalUs: number;
  releasedAt: number;
  getsAtRelease: number;
}

async function run(
  dir: string,
  pollIntervalMs: number,
  clients: Pick<FollowClientConfig, 'kind' | 'group' | 'execArgv'>[],
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
    const submitted = await Promise.all(
      processes.map(async (p, i) => ({
        message: await p.next('submitted'),
        at: Date.now(),
        gets: groupGets(server, clients[i]!.group),
      })),
    );
    // every task open and nothing changing for two more intervals (each is polled about once in each): the first
    // after the burst of submissions, then the steady state
    const sampleAll = () =>
      Promise.all(
        processes.map(async (p, i) => ({
          sample: await p.sample(),
          at: Date.now(),
          gets: groupGets(server, clients[i]!.group),
        })),
      );
    await sleep(pollIntervalMs);
    const firstEnd = await sampleAll();
    await sleep(pollIntervalMs);
    const steadyEnd = await sampleAll();
    const waiting: Waiting[] = await Promise.all(
      processes.map(async (p, i) => {
        const { sample, at, gets } = steadyEnd[i]!;
        const middle = firstEnd[i]!;
        // then what the process keeps, after a full collection whose CPU counts in neither window
        const collected = await p.sample(true);
        return {
          first: {
            cpuUs: middle.sample.cpuTotalUs - submitted[i]!.message.cpuTotalUs,
            ms: middle.at - submitted[i]!.at,
            polls: middle.gets - submitted[i]!.gets,
            majorGcs: middle.sample.majorGcs - submitted[i]!.message.majorGcs,
          },
          cpuUs: sample.cpuTotalUs - middle.sample.cpuTotalUs,
          ms: at - middle.at,
          polls: gets - middle.gets,
          majorGcs: sample.majorGcs - middle.sample.majorGcs,
          rssBytes: sample.rssBytes,
          maxRssBytes: sample.maxRssBytes,
          liveHeapBytes: collected.liveHeapBytes ?? Number.NaN,
          releasedCpuTotalUs: collected.cpuTotalUs,
          releasedAt: Date.now(),
          getsAtRelease: groupGets(server, clients[i]!.group),
        };
      }),
    );
    server.release();
    const done = await Promise.all(processes.map(async (p) => ({ message: await p.next('done'), at: Date.now() })));
    const figures = new Map<string, ClientFigures>();
    clients.forEach((client, i) => {
      figures.set(
        client.group,
        summarize(server, client.group, ready[i]!, submitted[i]!.message, waiting[i]!, done[i]!, count),
      );
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
  waiting: Waiting,
  finished: { message: Extract<FollowClientMessage, { type: 'done' }>; at: number },
  count: number,
): ClientFigures {
  const done = finished.message;
  const tasks = [...server.tasks.values()].filter((task) => task.group === group);
  const polls = tasks.reduce((n, task) => n + task.gets, 0);
  const followCpuUs = done.cpuTotalUs - waiting.releasedCpuTotalUs;
  const followMs = finished.at - waiting.releasedAt;
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
    waitFirstCorePercent: (waiting.first.cpuUs / 1000 / waiting.first.ms) * 100,
    waitFirstCpuUsPerPoll: waiting.first.cpuUs / Math.max(1, waiting.first.polls),
    waitFirstMajorGcs: waiting.first.majorGcs,
    waitCorePercent: (waiting.cpuUs / 1000 / waiting.ms) * 100,
    waitCpuUsPerPoll: waiting.cpuUs / Math.max(1, waiting.polls),
    waitMajorGcs: waiting.majorGcs,
    waitRssMb: (waiting.rssBytes - ready.rssBytes) / 2 ** 20,
    waitLiveHeapMb: (waiting.liveHeapBytes - ready.liveHeapBytes) / 2 ** 20,
    followCpuUsPerTask: followCpuUs / count,
    followCorePercent: (followCpuUs / 1000 / followMs) * 100,
    cpuUsPerPoll: followCpuUs / Math.max(1, polls - waiting.getsAtRelease),
    submitPeakRssMb: (submitted.maxRssBytes - ready.rssBytes) / 2 ** 20,
    waitPeakRssMb: (waiting.maxRssBytes - ready.rssBytes) / 2 ** 20,
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
      `then ${large} tasks on one TaskClient (pollIntervalMs ${largePollMs}; Node's default heap, then ` +
      `--max-old-space-size=${heapCapMb}; then the SDK alone); each waits two intervals before the release (the ` +
      `first after the submissions, then the steady state the "waiting" rows and targets are of), completions ` +
      `spread over 2`,
  );
  const floor = await measureFloor();
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
  const cappedRun = (
    await run(
      dir,
      largePollMs,
      [{ kind: 'closeout', group: 'closeout-capped', execArgv: [`--max-old-space-size=${heapCapMb}`] }],
      large,
    )
  ).get('closeout-capped')!;

  // the floor under both targets of the large run: the SDK alone (bench/followClient.ts, sdkAloneClient) following the
  // same tasks the same way, in a process of its own
  const sdkRun = (await run(dir, largePollMs, [{ kind: 'sdk', group: 'sdk-large' }], large)).get('sdk-large')!;

  const columns: [string, ClientFigures[]][] = [
    [`TaskClient ${small}`, smallRuns.closeout],
    [`ext-tasks ${small}`, smallRuns.ext],
    [`TaskClient ${large}`, [largeRun]],
    [`same, heap cap ${heapCapMb} MB`, [cappedRun]],
    [`SDK alone ${large}`, [sdkRun]],
  ];
  const rows: [string, (f: ClientFigures) => number, number][] = [
    ['submit, wall ms', (f) => f.submitMs, 0],
    ['submit, client CPU µs/task', (f) => f.submitCpuUsPerTask, 0],
    ['waiting, first interval, % of one core', (f) => f.waitFirstCorePercent, 1],
    ['waiting, first interval, client CPU µs/poll', (f) => f.waitFirstCpuUsPerPoll, 0],
    ['waiting, first interval, full collections', (f) => f.waitFirstMajorGcs, 0],
    ['waiting, % of one core', (f) => f.waitCorePercent, 1],
    ['waiting, client CPU µs/poll', (f) => f.waitCpuUsPerPoll, 0],
    ['waiting, full collections', (f) => f.waitMajorGcs, 0],
    ['RSS while waiting over baseline, MB', (f) => f.waitRssMb, 1],
    ['live heap while waiting over baseline, MB', (f) => f.waitLiveHeapMb, 1],
    ['follow, client CPU µs/task', (f) => f.followCpuUsPerTask, 0],
    ['follow, % of one core', (f) => f.followCorePercent, 1],
    ['follow, client CPU µs/poll', (f) => f.cpuUsPerPoll, 0],
    ['peak RSS over baseline, MB', (f) => f.extraRssMb, 1],
    ['  the same by the end of the submissions', (f) => f.submitPeakRssMb, 1],
    ['  the same by the release (after the wait)', (f) => f.waitPeakRssMb, 1],
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

  // the floor: one tasks/get alone, and what the large run's poll rate costs at that price
  const pollsPerSecond = (large / largePollMs) * 1000;
  const atRate = (cpuUs: number) => `${fixed((pollsPerSecond * cpuUs) / 10_000, 1)}%`;
  console.log('');
  console.log(
    table(
      [`one tasks/get alone (median of 3)`, 'client CPU µs', `% of one core at ${fixed(pollsPerSecond)} polls/s`],
      [
        ['SDK Client.request, same fetch', fixed(floor.sdkCpuUsPerRequest), atRate(floor.sdkCpuUsPerRequest)],
        ['raw HTTP, prebuilt bytes', fixed(floor.rawCpuUsPerRequest), atRate(floor.rawCpuUsPerRequest)],
        [
          `same, paced as a waiting client (${fixed(pollsPerSecond)}/s on a ${pollGridMs(largePollMs, DEFAULT_POLL_POLICY.tickMs)} ms grid)`,
          fixed(floor.rawPacedCpuUsPerRequest),
          atRate(floor.rawPacedCpuUsPerRequest),
        ],
        [
          `same, each answer checked (the SDK's result schema, the task's check)`,
          fixed(floor.checkedPacedCpuUsPerRequest),
          atRate(floor.checkedPacedCpuUsPerRequest),
        ],
        [
          `the TaskClient's poll fast path alone, paced alike`,
          fixed(floor.fastPacedCpuUsPerRequest),
          atRate(floor.fastPacedCpuUsPerRequest),
        ],
        [`TaskClient ${large}, waiting`, fixed(largeRun.waitCpuUsPerPoll), fixed(largeRun.waitCorePercent, 1) + '%'],
      ],
    ),
  );

  // the targets, each a line
  const c = (pick: (f: ClientFigures) => number) => medianOf(smallRuns.closeout, pick);
  const e = (pick: (f: ClientFigures) => number) => medianOf(smallRuns.ext, pick);
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT MET');
  // against polling exactly every interval from creation (d/P + 1 counts one poll more than that, on average half)
  const pollRatio = largeRun.pollsPerTask / largeRun.exactPollsPerTask;
  const cpuPerTask = (f: ClientFigures) => f.submitCpuUsPerTask + f.followCpuUsPerTask;
  const mb = (value: number) => `${fixed(value, 1)} MB`;
  console.log('');
  console.log(
    table(
      ['target', 'measured', ''],
      [
        [`${large} tasks: extra RSS < 100 MB, peak`, mb(largeRun.extraRssMb), verdict(largeRun.extraRssMb < 100)],
        [`  same, while waiting`, mb(largeRun.waitRssMb), verdict(largeRun.waitRssMb < 100)],
        [
          `  peak by the end of the submissions, by the release`,
          `${mb(largeRun.submitPeakRssMb)}, ${mb(largeRun.waitPeakRssMb)}`,
          '',
        ],
        [`  same, heap cap ${heapCapMb} MB, peak`, mb(cappedRun.extraRssMb), verdict(cappedRun.extraRssMb < 100)],
        [`  (floor) the SDK alone, ${large} tasks, peak`, mb(sdkRun.extraRssMb), ''],
        [
          `${large} tasks: < 5% of one core while waiting`,
          `${fixed(largeRun.waitCorePercent, 1)}%`,
          verdict(largeRun.waitCorePercent < 5),
        ],
        [`  same, first interval after the submissions`, `${fixed(largeRun.waitFirstCorePercent, 1)}%`, ''],
        [`  (floor) the SDK alone, ${large} tasks, waiting`, `${fixed(sdkRun.waitCorePercent, 1)}%`, ''],
        [
          `${large} tasks: CPU per waiting poll <= 1.5x raw HTTP`,
          `${fixed(largeRun.waitCpuUsPerPoll)} / ${fixed(floor.rawCpuUsPerRequest)} µs = ` +
            `x${fixed(largeRun.waitCpuUsPerPoll / floor.rawCpuUsPerRequest, 2)}`,
          verdict(largeRun.waitCpuUsPerPoll <= 1.5 * floor.rawCpuUsPerRequest),
        ],
        [
          `  (floor) raw HTTP paced as a waiting client`,
          `${fixed(floor.rawPacedCpuUsPerRequest)} µs, x${fixed(floor.rawPacedCpuUsPerRequest / floor.rawCpuUsPerRequest, 2)}`,
          '',
        ],
        [
          `  (floor) the same, each answer checked as a TaskClient checks it`,
          `${fixed(floor.checkedPacedCpuUsPerRequest)} µs, x${fixed(floor.checkedPacedCpuUsPerRequest / floor.rawCpuUsPerRequest, 2)}`,
          '',
        ],
        [
          `  the poll fast path alone, paced alike`,
          `${fixed(floor.fastPacedCpuUsPerRequest)} µs, x${fixed(floor.fastPacedCpuUsPerRequest / floor.rawCpuUsPerRequest, 2)}`,
          '',
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
          `${fixed(c(cpuPerTask))} vs ${fixed(e(cpuPerTask))} µs`,
          verdict(c(cpuPerTask) <= e(cpuPerTask)),
        ],
        [
          `vs ext-tasks: memory no more`,
          `${mb(c((f) => f.extraRssMb))} vs ${mb(e((f) => f.extraRssMb))}`,
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

/** The floor process: one tasks/get through the SDK alone and as raw HTTP, against a server of its own. */
async function measureFloor(): Promise<Extract<FollowClientMessage, { type: 'floor' }>> {
  const server = await startClockworkServer(largePollMs);
  const process = startFollowClient({
    kind: 'closeout',
    mode: 'floor',
    url: server.url,
    group: 'floor',
    offsetsMs: [],
    submitConcurrency: 1,
    floorRequests: flags.smoke ? 150 : 3000,
    floorPacedPerSecond: (large / largePollMs) * 1000,
    // the grid the TaskClient's scheduler puts these polls on
    floorPacedGridMs: pollGridMs(largePollMs, DEFAULT_POLL_POLICY.tickMs),
  });
  try {
    return await process.next('floor');
  } finally {
    await process.kill();
    await server.close();
  }
}
