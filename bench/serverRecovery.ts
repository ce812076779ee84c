/**
 * Benchmark 2 (bench/RESULTS.md section 2): how fast a restarted server settles the tasks a crash interrupted. A
 * `closeout serve` child on a SQLite file gets N tasks (half resumable `batch_job`, half non-resumable
 * `export_report`, each a single step of RUN ms), is SIGKILLed while all are working, and a new `closeout serve` is
 * started on the same file. Measured from the new process's spawn: when it listens (it takes over the orphans before
 * listening), when every non-resumable task is `failed` (interrupted), when every resumable one runs again (attempt
 * 2), and when every task is terminal. The resumable ones re-run from the top, so they cannot end before RUN ms:
 * `overhead` is that last time minus RUN. Settling is watched in the store itself (a TaskStore on the same file, read
 * with `get`), so watching costs the server nothing; a last tasks/get of every task checks what clients are told.
 * For scale, each round also starts a server on an empty store (`ready, empty store`).
 *
 *   node dist/bench/bench/serverRecovery.js [--smoke] [--tasks 1000] [--run-ms 15000] [--rounds 3]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { SqliteTaskStore, type StoredTask } from 'closeout/server';

import { type ServeProcess, startServe } from '../test/support/processes.js';
import { wireRequest } from '../test/support/rpc.js';
import { fixed, machineLine, median, table } from './figures.js';
import { positive } from './flags.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    'run-ms': { type: 'string' },
    rounds: { type: 'string' },
  },
});
const taskCount = positive(flags.tasks, flags.smoke ? 10 : 1000);
const runMs = positive(flags['run-ms'], flags.smoke ? 1500 : 15_000);
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
  nonResumableFailedMs: number;
  resumableRerunningMs: number;
  allTerminalMs: number;
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

/** A JSON-RPC call over a keep-alive connection (fetch costs the caller more than the server). */
function call(
  agent: Agent,
  url: string,
  method: string,
  params: Record<string, unknown>,
  token: string,
): Promise<{ result?: Record<string, unknown>; error?: unknown }> {
  const { body, headers } = wireRequest(method, params, { declareTasks: true });
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        agent,
        headers: { ...headers, authorization: `Bearer ${token}`, 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('error', reject);
        res.on('end', () => {
          try {
            resolve(JSON.parse(text) as { result?: Record<string, unknown>; error?: unknown });
          } catch {
            reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`));
          }
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function createTasks(agent: Agent, url: string): Promise<CreatedTask[]> {
  const tokens = Object.keys(TOKENS);
  const specs = Array.from({ length: taskCount }, (_, i) => ({
    token: tokens[i % tokens.length]!,
    resumable: i % 2 === 0,
  }));
  const created: CreatedTask[] = [];
  await eachConcurrently(specs, async ({ token, resumable }) => {
    const params = resumable
      ? { name: 'batch_job', arguments: { items: 1, stepMs: runMs } }
      : { name: 'export_report', arguments: { pages: 1, pageMs: runMs } };
    const response = await call(agent, url, 'tools/call', params, token);
    const taskId = response.result?.['taskId'];
    if (typeof taskId !== 'string') throw new Error(`tools/call did not create a task: ${JSON.stringify(response)}`);
    created.push({ taskId, token, resumable });
  });
  return created;
}

const isTerminal = (task: StoredTask | undefined) =>
  task !== undefined && task.status !== 'working' && task.status !== 'input_required';

async function round(dir: string, index: number, live: Set<ServeProcess>): Promise<RoundFigures> {
  const storePath = join(dir, `round-${index}.db`);
  const serve = async (file: string) => {
    const started = performance.now();
    const process = await startServe(['--store', file, ...tokenArgs], 30_000);
    live.add(process);
    return { process, readyMs: performance.now() - started, started };
  };
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });

  const empty = await serve(join(dir, `empty-${index}.db`));
  await empty.process.stop();

  const first = await serve(storePath);
  const createStart = performance.now();
  const tasks = await createTasks(agent, first.process.url);
  const createMs = performance.now() - createStart;
  await first.process.kill();

  const second = await serve(storePath);
  // the same file, read as the server reads it
  const store = new SqliteTaskStore(storePath);
  let nonResumableFailedMs = Number.NaN;
  let resumableRerunningMs = Number.NaN;
  try {
    const pending = new Map(tasks.map((task) => [task.taskId, task]));
    while (pending.size > 0) {
      const now = performance.now() - second.started;
      if (now > SETTLE_DEADLINE_MS)
        throw new Error(`${pending.size} tasks still open ${SETTLE_DEADLINE_MS} ms after the restart`);
      let nonResumableOpen = 0;
      let resumableNotRerunning = 0;
      for (const task of pending.values()) {
        const stored = await store.get(task.taskId);
        if (isTerminal(stored)) pending.delete(task.taskId);
        else if (!task.resumable) nonResumableOpen++;
        else if ((stored?.attempt ?? 1) < 2) resumableNotRerunning++;
      }
      if (Number.isNaN(nonResumableFailedMs) && nonResumableOpen === 0) nonResumableFailedMs = now;
      if (Number.isNaN(resumableRerunningMs) && resumableNotRerunning === 0) resumableRerunningMs = now;
      if (pending.size > 0) await sleep(10);
    }
  } finally {
    await store.close();
  }
  const allTerminalMs = performance.now() - second.started;

  // what a client is told: a resumable task completed by its second attempt, any other failed as interrupted
  let rerun = 0;
  let interrupted = 0;
  let finishedBeforeKill = 0;
  let wrongOutcomes = 0;
  let firstWrongOutcome: string | undefined;
  await eachConcurrently(tasks, async (task) => {
    const response = await call(agent, second.process.url, 'tasks/get', { taskId: task.taskId }, task.token);
    const status = response.result?.['status'];
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
  agent.destroy();
  await second.process.stop();
  return {
    createMs,
    readyEmptyMs: empty.readyMs,
    readyMs: second.readyMs,
    nonResumableFailedMs,
    resumableRerunningMs,
    allTerminalMs,
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
        ['every non-resumable task failed', col((f) => f.nonResumableFailedMs)],
        ['every resumable task running again', col((f) => f.resumableRerunningMs)],
        ['every task terminal', col((f) => f.allTerminalMs)],
        [`overhead (every task terminal - ${runMs} ms run)`, col((f) => f.allTerminalMs - runMs)],
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
