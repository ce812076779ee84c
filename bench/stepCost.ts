/**
 * Benchmark 7 (bench/RESULTS.md section 7): what a durable step costs a task handler. In one process, a TaskServer runs
 * `--tasks` tasks per scenario, `--concurrency` at a time, straight through `createTask` (no HTTP: the store's work is
 * what is measured), on SQLite (default `synchronous=FULL`) and on PostgreSQL, each worker waiting for its task's
 * terminal write before it creates the next. Scenarios: a plain handler that returns at once; one `ctx.step`; one
 * `ctx.checkpoint.set`; ten steps. "task ms" is from the create call to the terminal write;
 * "step ms" is one `ctx.step` (or checkpoint write) as the handler sees it: the read of earlier steps on first use,
 * then the fenced commit.
 *
 *   node dist/bench/bench/stepCost.js [--smoke] [--tasks 500] [--concurrency 16] [--rounds 3] [--skip-postgres]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { SqliteTaskStore, type TaskContext, TaskServer, type TaskStore } from 'closeout/server';

import { fixed, machineLine, median, percentile, table } from './figures.js';
import { openPostgresStore } from './postgresStore.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    concurrency: { type: 'string' },
    rounds: { type: 'string' },
    'skip-postgres': { type: 'boolean', default: false },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const TASKS = positive(flags.tasks, flags.smoke ? 20 : 500);
const CONCURRENCY = positive(flags.concurrency, flags.smoke ? 4 : 16);
const ROUNDS = positive(flags.rounds, flags.smoke ? 1 : 3);
/** No run may take longer than this, whatever the machine. */
const DEADLINE_MS = 120_000;

type Scenario = 'plain' | 'step' | 'checkpoint' | 'steps10';
const SCENARIOS: Record<Scenario, string> = {
  plain: 'handler returns at once',
  step: 'one ctx.step',
  checkpoint: 'one ctx.checkpoint.set',
  steps10: 'ten ctx.step',
};

interface Figures {
  tasksPerSecond: number;
  taskP50: number;
  taskP99: number;
  stepP50: number;
  stepP99: number;
}

/**
 * The store, with the moment each task's terminal write came back told to `onFinished`: how the benchmark knows a task
 * is done without polling the store it measures.
 */
function observingFinish(store: TaskStore, onFinished: (taskId: string) => void): TaskStore {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'finish') {
        return async (...args: Parameters<TaskStore['finish']>) => {
          const written = await target.finish(...args);
          if (written) onFinished(args[0].taskId);
          return written;
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

async function runScenario(store: TaskStore, scenario: Scenario): Promise<Figures> {
  const stepMs: number[] = [];
  const finishedAt = new Map<string, number>();
  const waiting = new Map<string, () => void>();
  const observed = observingFinish(store, (taskId) => {
    finishedAt.set(taskId, performance.now());
    waiting.get(taskId)?.();
  });
  const tasks = new TaskServer({ store: observed, onError: () => {} });
  const timed = async (write: () => Promise<unknown>) => {
    const started = performance.now();
    await write();
    stepMs.push(performance.now() - started);
  };
  tasks.registerTool('job', { task: { support: 'required' } }, async (_args, ctx: TaskContext) => {
    if (scenario === 'step') await timed(() => ctx.step('only', () => ({ ok: true })));
    if (scenario === 'checkpoint') await timed(() => ctx.checkpoint.set({ done: 1 }));
    if (scenario === 'steps10') for (let i = 0; i < 10; i++) await timed(() => ctx.step(`s${i}`, () => i));
    return { content: [] };
  });
  const tool = tasks.tool('job')!;
  const latencies: number[] = [];
  const started = performance.now();
  let next = 0;
  // closed loop on completion: each worker creates a task and waits for its terminal write before the next
  const worker = async () => {
    while (next < TASKS) {
      next++;
      const begin = performance.now();
      const { taskId } = await tasks.createTask(tool, {}, 'bench', undefined);
      if (!finishedAt.has(taskId)) {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(
            () => reject(new Error(`${scenario}: task ${taskId} not finished in time`)),
            DEADLINE_MS,
          );
          waiting.set(taskId, () => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
      latencies.push(finishedAt.get(taskId)! - begin);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const elapsed = performance.now() - started;
  await tasks.close();
  const sortedTasks = latencies.sort((x, y) => x - y);
  const sortedSteps = stepMs.sort((x, y) => x - y);
  return {
    tasksPerSecond: (TASKS / elapsed) * 1000,
    taskP50: percentile(sortedTasks, 50),
    taskP99: percentile(sortedTasks, 99),
    stepP50: percentile(sortedSteps, 50),
    stepP99: percentile(sortedSteps, 99),
  };
}

async function measure(label: string, open: () => Promise<{ store: TaskStore; close: () => Promise<void> }>) {
  const rounds: Record<Scenario, Figures[]> = { plain: [], step: [], checkpoint: [], steps10: [] };
  const order = Object.keys(SCENARIOS) as Scenario[];
  for (let round = 0; round < ROUNDS; round++) {
    // a fresh store per round, the scenario order rotated, so neither a growing file nor warm-up favours one
    const { store, close } = await open();
    try {
      for (let i = 0; i < order.length; i++) {
        const scenario = order[(i + round) % order.length]!;
        rounds[scenario].push(await runScenario(store, scenario));
      }
    } finally {
      await close();
    }
  }
  const rows = order.map((scenario) => {
    const of = (key: keyof Figures) => median(rounds[scenario].map((f) => f[key]));
    return [
      `${label}.${scenario}`,
      SCENARIOS[scenario],
      fixed(of('tasksPerSecond')),
      fixed(of('taskP50'), 1),
      fixed(of('taskP99'), 1),
      scenario === 'plain' ? '-' : fixed(of('stepP50'), 2),
      scenario === 'plain' ? '-' : fixed(of('stepP99'), 2),
    ];
  });
  console.log(table(['id', 'scenario', 'tasks/s', 'task p50 ms', 'task p99 ms', 'step p50 ms', 'step p99 ms'], rows));
  const ratio = (scenario: Scenario) =>
    median(rounds[scenario].map((f, i) => f.tasksPerSecond / rounds.plain[i]!.tasksPerSecond));
  console.log(
    `${label} throughput against plain: step ${fixed(ratio('step'), 2)}, checkpoint ${fixed(ratio('checkpoint'), 2)}, ten steps ${fixed(ratio('steps10'), 2)}`,
  );
}

console.log(`stepCost · ${machineLine()}`);
console.log(`${TASKS} tasks per scenario, ${CONCURRENCY} created at a time, ${ROUNDS} rounds (medians)\n`);
await measure('sqlite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-steps-'));
  const store = new SqliteTaskStore(join(dir, 'tasks.db'));
  return {
    store,
    close: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
if (flags['skip-postgres']) {
  console.log('\npostgres skipped: --skip-postgres');
} else {
  console.log('');
  let skipped: string | undefined;
  await measure('postgres', async () => {
    const opened = await openPostgresStore();
    if ('skipped' in opened) {
      skipped = opened.skipped;
      throw new Error(opened.skipped);
    }
    return opened;
  }).catch((error: unknown) => {
    if (!skipped) throw error;
    console.log(`postgres skipped: ${skipped}`);
  });
}
