/**
 * Benchmark 2 (issue 6, point 5): how fast a restarted server settles the tasks a crash interrupted. A
 * `closeout serve` child on a SQLite file gets N tasks (half resumable `batch_job`, half non-resumable
 * `export_report`, each a single step of RUN ms), is SIGKILLed while all are working, and a new `closeout serve` is
 * started on the same file. Measured from the new process's spawn: when it listens (it takes over the orphans before
 * listening), when every non-resumable task reads `failed` (interrupted), and when every task is terminal. The
 * resumable ones re-run from the top, so they cannot settle before RUN ms: `overhead` is settle time minus RUN.
 * For scale, each round also starts a server on an empty store (`ready, empty store`).
 *
 *   node dist/bench/bench/serverRecovery.js [--smoke] [--tasks 1000] [--run-ms 5000] [--rounds 3]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { rpc } from '../test/support/rpc.js';
import { fixed, machineLine, median, table } from './figures.js';
import { type ServeProcess, startServe } from './serveProcess.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    'run-ms': { type: 'string' },
    rounds: { type: 'string' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const taskCount = positive(flags.tasks, flags.smoke ? 10 : 1000);
const runMs = positive(flags['run-ms'], flags.smoke ? 1500 : 10_000);
const rounds = positive(flags.rounds, flags.smoke ? 1 : 3);
const CONCURRENCY = 16;
const SETTLE_DEADLINE_MS = 120_000;
// two principals, so no one caller nears a per-principal open-task limit
const TOKENS = { 'bench-token-a': 'bench-a', 'bench-token-b': 'bench-b' };
const tokenArgs = Object.entries(TOKENS).flatMap(([token, principal]) => ['--token', `${token}=${principal}`]);

interface CreatedTask {
  taskId: string;
  token: string;
  resumable: boolean;
}

interface RoundFigures {
  createMs: number;
  readyEmptyMs: number;
  readyMs: number;
  nonResumableSettledMs: number;
  allSettledMs: number;
  rerun: number;
  interrupted: number;
  finishedBeforeKill: number;
  wrongOutcomes: number;
  firstWrongOutcome?: string;
}

async function eachConcurrently<T>(items: readonly T[], work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
}

async function createTasks(url: string): Promise<CreatedTask[]> {
  const tokens = Object.keys(TOKENS);
  const specs = Array.from({ length: taskCount }, (_, i) => ({
    token: tokens[i % tokens.length]!,
    resumable: i % 2 === 0,
  }));
  const created: CreatedTask[] = [];
  await eachConcurrently(specs, async ({ token, resumable }) => {
    const call = resumable
      ? { name: 'batch_job', arguments: { items: 1, stepMs: runMs } }
      : { name: 'export_report', arguments: { pages: 1, pageMs: runMs } };
    const response = await rpc(url, 'tools/call', call, { token });
    const taskId = response.result?.['taskId'];
    if (typeof taskId !== 'string') throw new Error(`tools/call did not create a task: ${JSON.stringify(response)}`);
    created.push({ taskId, token, resumable });
  });
  return created;
}

async function round(dir: string, index: number, live: Set<ServeProcess>): Promise<RoundFigures> {
  const store = join(dir, `round-${index}.db`);
  const serve = async (file: string) => {
    const started = performance.now();
    const process = await startServe(['--store', file, ...tokenArgs]);
    live.add(process);
    return { process, readyMs: performance.now() - started, started };
  };

  const empty = await serve(join(dir, `empty-${index}.db`));
  await empty.process.stop();

  const first = await serve(store);
  const createStart = performance.now();
  const tasks = await createTasks(first.process.url);
  const createMs = performance.now() - createStart;
  await first.process.kill();

  const second = await serve(store);
  const open = new Map(tasks.map((task) => [task.taskId, task]));
  let nonResumableSettledMs = Number.NaN;
  let rerun = 0;
  let interrupted = 0;
  let finishedBeforeKill = 0;
  let wrongOutcomes = 0;
  let firstWrongOutcome: string | undefined;
  while (open.size > 0) {
    if (performance.now() - second.started > SETTLE_DEADLINE_MS) {
      throw new Error(`${open.size} tasks still open ${SETTLE_DEADLINE_MS} ms after the restart`);
    }
    await eachConcurrently([...open.values()], async (task) => {
      const response = await rpc(second.process.url, 'tasks/get', { taskId: task.taskId }, { token: task.token });
      const status = response.result?.['status'];
      if (status === 'working' || status === 'input_required') return;
      open.delete(task.taskId);
      // resumable: completed by a second attempt; the others: failed as interrupted
      const attempt = (response.result?.['result'] as { structuredContent?: { attempt?: number } } | undefined)
        ?.structuredContent?.attempt;
      const message = (response.result?.['error'] as { message?: string } | undefined)?.message ?? '';
      if (task.resumable && status === 'completed' && attempt === 2) rerun++;
      else if (!task.resumable && status === 'failed' && message.includes('interrupted')) interrupted++;
      else if (status === 'completed' && (attempt === 1 || !task.resumable)) finishedBeforeKill++;
      else {
        wrongOutcomes++;
        firstWrongOutcome ??= JSON.stringify(response).slice(0, 300);
      }
    });
    const now = performance.now() - second.started;
    if (Number.isNaN(nonResumableSettledMs) && ![...open.values()].some((task) => !task.resumable)) {
      nonResumableSettledMs = now;
    }
    if (open.size > 0) await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const allSettledMs = performance.now() - second.started;
  await second.process.stop();
  return {
    createMs,
    readyEmptyMs: empty.readyMs,
    readyMs: second.readyMs,
    nonResumableSettledMs,
    allSettledMs,
    rerun,
    interrupted,
    finishedBeforeKill,
    wrongOutcomes,
    ...(firstWrongOutcome !== undefined && { firstWrongOutcome }),
  };
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-recovery-'));
const live = new Set<ServeProcess>();
try {
  console.log(`serverRecovery · ${machineLine()}`);
  console.log(
    `${taskCount} interrupted tasks (half resumable batch_job, half export_report, each one step of ${runMs} ms), ` +
      `SQLite store, closeout serve SIGKILLed and restarted, ${rounds} round(s)`,
  );
  const figures: RoundFigures[] = [];
  for (let i = 0; i < rounds; i++) figures.push(await round(dir, i, live));
  const col = (pick: (f: RoundFigures) => number) => fixed(median(figures.map(pick)));
  console.log('');
  console.log(
    table(
      ['median over rounds', 'ms'],
      [
        [`create ${taskCount} tasks (first process)`, col((f) => f.createMs)],
        ['ready, empty store (spawn to listening)', col((f) => f.readyEmptyMs)],
        ['ready after the crash (takeover done)', col((f) => f.readyMs)],
        ['every non-resumable task failed', col((f) => f.nonResumableSettledMs)],
        ['every task terminal', col((f) => f.allSettledMs)],
        [`overhead (every task terminal - ${runMs} ms run)`, col((f) => f.allSettledMs - runMs)],
      ],
    ),
  );
  const total = (pick: (f: RoundFigures) => number) => figures.reduce((n, f) => n + pick(f), 0);
  const wrong = total((f) => f.wrongOutcomes);
  console.log(
    `outcomes: ${total((f) => f.rerun)} resumable re-run and completed (attempt 2), ` +
      `${total((f) => f.interrupted)} failed as interrupted, ${total((f) => f.finishedBeforeKill)} finished before the ` +
      `kill (raise --run-ms if not 0), ${wrong} wrong`,
  );
  if (wrong > 0) {
    console.log(`first wrong outcome: ${figures.find((f) => f.firstWrongOutcome)?.firstWrongOutcome}`);
    process.exitCode = 1;
  }
} finally {
  for (const process of live) await process.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
