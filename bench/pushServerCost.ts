/**
 * Benchmark (bench/RESULTS.md section 9): what 10,000 tasks followed by push cost the server. One process
 * serves a TaskServer on SQLite over loopback HTTP; N tasks are created and stay `working` (their handlers wait);
 * a consumer in a child process opens one `subscriptions/listen` stream for all N and reads every notification.
 * Measured in the server process only:
 *   open      time from the listen request to the consumer holding the acknowledgement and all N first states;
 *   memory    heap and RSS held for the subscription (after GC, stream open, minus before it was opened);
 *   idle      server CPU over a quiet window with all N followed (the periodic check compares their versions every
 *             5 s), against the same window once the stream is gone (what N running tasks cost without push: their
 *             lease renewals);
 *   change    server CPU per status change (ctx.status of another task each time), with the stream open until the
 *             consumer has a notification for every change, against the same changes with no stream open: the
 *             difference is what push adds to a change.
 *
 *   node dist/bench/bench/pushServerCost.js [--smoke] [--tasks 10000] [--changes 2000] [--idle-ms 10000]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { serveTaskServer, SqliteTaskStore, TaskServer } from 'closeout/server';

import { fixed, machineLine, table } from './figures.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    changes: { type: 'string' },
    'idle-ms': { type: 'string' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const taskCount = positive(flags.tasks, flags.smoke ? 50 : 10_000);
const changes = positive(flags.changes, flags.smoke ? 50 : 2000);
const idleMs = positive(flags['idle-ms'], flags.smoke ? 500 : 10_000);
const DEADLINE_MS = flags.smoke ? 60_000 : 600_000;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** The consumer: reads the stream, and prints how many task notifications it has, whenever the count moves. */
const CONSUMER = `
let input = '';
for await (const chunk of process.stdin) input += chunk;
const [url, ids] = [process.argv[1], JSON.parse(input)];
const response = await fetch(url, {
  method: 'POST',
  headers: {
    'content-type': 'application/json', accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2026-07-28', 'mcp-method': 'subscriptions/listen',
  },
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'subscriptions/listen', params: {
    _meta: {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientInfo': { name: 'bench-consumer', version: '0' },
      'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
    },
    notifications: { taskIds: ids },
  } }),
});
const decoder = new TextDecoder();
let text = '';
let count = 0;
let reported = 0;
for await (const chunk of response.body) {
  text += decoder.decode(chunk, { stream: true });
  let end;
  while ((end = text.indexOf('\\n\\n')) >= 0) {
    if (text.slice(0, end).includes('"notifications/tasks"')) count++;
    text = text.slice(end + 2);
  }
  if (count !== reported) { reported = count; process.stdout.write(count + '\\n'); }
}
`;

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-push-'));
const store = new SqliteTaskStore(join(dir, 'tasks.db'));
const tasks = new TaskServer({
  store,
  maxOpenTasksPerPrincipal: Infinity,
  maxSubscribedTasksPerPrincipal: taskCount,
  onError: (error) => console.error(`[server] ${error.message}`),
});
const statusOf = new Map<string, (message: string) => Promise<void>>();
tasks.registerTool('hold', { task: { support: 'required' } }, async (_args, ctx) => {
  statusOf.set(ctx.taskId!, ctx.status);
  await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
  return { content: [] };
});
const serving = await serveTaskServer(tasks, { port: 0 });
const deadline = Date.now() + DEADLINE_MS;
const until = async (what: string, ready: () => boolean) => {
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await sleep(5);
  }
};

try {
  const tool = tasks.tool('hold')!;
  const taskIds: string[] = [];
  for (let i = 0; i < taskCount; i++) {
    taskIds.push((await tasks.createTask(tool, {}, 'anonymous', undefined)).taskId);
    if (i % 500 === 0) await sleep(0);
  }
  await until('every handler to start', () => statusOf.size === taskCount);
  const heapOf = () => {
    gc();
    gc();
    const { heapUsed, rss } = process.memoryUsage();
    return { heapUsed, rss };
  };
  await sleep(200);
  const before = heapOf();

  // the stream for all N
  let received = 0;
  const openedAt = performance.now();
  const consumer = spawn(process.execPath, ['--input-type=module', '-e', CONSUMER, serving.url], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  // the ids go by stdin: ten thousand of them are over the size of one command-line argument
  consumer.stdin.end(JSON.stringify(taskIds));
  consumer.stdout.setEncoding('utf8').on('data', (data: string) => {
    const last = data.trim().split('\n').at(-1);
    if (last) received = Number(last);
  });
  await until('the first state of every task', () => received >= taskCount);
  const openMs = performance.now() - openedAt;
  await sleep(200);
  const held = heapOf();

  // idle: nothing changes, the periodic check runs
  const idleShareOf = async () => {
    const idleCpu = process.cpuUsage();
    const idleStart = performance.now();
    await sleep(idleMs);
    const idleUsage = process.cpuUsage(idleCpu);
    return (idleUsage.user + idleUsage.system) / 1000 / (performance.now() - idleStart);
  };
  const idleShare = await idleShareOf();

  // changes one after the other, each of another task (so none coalesces with another); with the stream open, the
  // count stops once the consumer has a notification for every one of them
  const makeChanges = async (label: string, awaitDelivery: boolean) => {
    const start = process.cpuUsage();
    const startedAt = performance.now();
    const expected = received + changes;
    for (let i = 0; i < changes; i++) await statusOf.get(taskIds[i % taskIds.length]!)!(`${label} ${i}`);
    if (awaitDelivery) await until('a notification per change', () => received >= expected);
    const usage = process.cpuUsage(start);
    return { cpuUs: (usage.user + usage.system) / changes, wallMs: (performance.now() - startedAt) / changes };
  };
  const withPush = await makeChanges('pushed', true);
  consumer.kill('SIGKILL');
  await until('the stream to be forgotten', () => tasks.push.stats().streams === 0);
  const idleUnpushedShare = await idleShareOf();
  const withoutPush = await makeChanges('unpushed', false);

  console.log(`pushServerCost: ${taskCount} tasks followed on one stream, ${changes} status changes (SQLite)`);
  console.log(machineLine());
  console.log(
    table(
      ['figure', 'value'],
      [
        ['open ms', fixed(openMs)],
        ['heap MiB', fixed((held.heapUsed - before.heapUsed) / 2 ** 20, 1)],
        ['heap per task B', fixed((held.heapUsed - before.heapUsed) / taskCount)],
        ['rss MiB', fixed((held.rss - before.rss) / 2 ** 20, 1)],
        ['idle cpu %', fixed(idleShare * 100, 2)],
        ['idle cpu unpushed %', fixed(idleUnpushedShare * 100, 2)],
        ['push idle cpu %', fixed((idleShare - idleUnpushedShare) * 100, 2)],
        ['change cpu us', fixed(withPush.cpuUs)],
        ['change cpu unpushed us', fixed(withoutPush.cpuUs)],
        ['push cpu per change us', fixed(Math.max(0, withPush.cpuUs - withoutPush.cpuUs))],
        ['change wall ms', fixed(withPush.wallMs, 2)],
        ['change wall unpushed ms', fixed(withoutPush.wallMs, 2)],
      ],
    ),
  );
} finally {
  await serving.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
