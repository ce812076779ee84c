/**
 * Benchmark 7 (issue 15): close-out lateness, push against polling, in one run. A Closeout server on SQLite (in this
 * process) runs N tasks for each of two TaskClients (the same SQLite ledger file kind, the same offsets): one follows
 * by push (`subscriptions/listen`, the default), the other with push off, polling at the server's `pollIntervalMs`.
 * Every task stays `working` until both clients have submitted all of theirs, then finishes at its offset. Lateness of
 * a task: from its handler returning (the server's terminal write follows at once) to the client's `closed` event
 * (after the ledger commit), both on this process's monotonic clock. Also counted: tasks/get and subscriptions/listen
 * each client sent.
 *
 *   node dist/bench/bench/pushLateness.js [--smoke] [--tasks 1000] [--poll-ms 1000] [--spread-ms 5000]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import type { TaskClient } from 'closeout/client';
import { connectHttpTaskClient, isTaskHandle } from 'closeout/client';
import { serveTaskServer, SqliteTaskStore, TaskServer } from 'closeout/server';

import { fixed, machineLine, percentile, table } from './figures.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    tasks: { type: 'string' },
    'poll-ms': { type: 'string' },
    'spread-ms': { type: 'string' },
  },
});
const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
};
const tasks = positive(flags.tasks, flags.smoke ? 20 : 1000);
const pollMs = positive(flags['poll-ms'], flags.smoke ? 300 : 1000);
const spreadMs = positive(flags['spread-ms'], flags.smoke ? 500 : 5000);
const DEADLINE_MS = spreadMs + 10 * pollMs + 120_000;
const SUBMIT_CONCURRENCY = 16;

const now = () => performance.now();

/** Offsets in [0, spreadMs), the same for both clients (mulberry32, fixed seed). */
function offsets(count: number, seed = 15): number[] {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return Array.from({ length: count }, () => Math.floor(next() * spreadMs));
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-push-'));
const store = new SqliteTaskStore(join(dir, 'server.db'));
const server = new TaskServer({ store, maxOpenTasksPerPrincipal: 4 * tasks });
/** When each task's handler returned, by `${client}:${n}`. */
const finishedAt = new Map<string, number>();
let release: () => void = () => undefined;
const released = new Promise<void>((resolve) => (release = resolve));
server.registerTool('timed', { task: { support: 'required', pollIntervalMs: pollMs } }, async (args) => {
  await released;
  await sleep(Number(args['atMs']));
  finishedAt.set(`${String(args['client'])}:${String(args['n'])}`, now());
  return { content: [{ type: 'text', text: 'done' }] };
});
const serving = await serveTaskServer(server, { port: 0, host: '127.0.0.1' });

interface Follower {
  name: 'push' | 'polling';
  client: TaskClient;
  sent: Map<string, number>;
  closedAt: Map<string, number>;
  nOf: Map<string, number>;
}

async function follower(name: Follower['name']): Promise<Follower> {
  const sent = new Map<string, number>();
  const closedAt = new Map<string, number>();
  const counting: typeof fetch = (input, init) => {
    const method = new Headers(init?.headers).get('mcp-method');
    if (method) sent.set(method, (sent.get(method) ?? 0) + 1);
    return fetch(input, init);
  };
  const client = await connectHttpTaskClient(serving.url, {
    ledger: join(dir, `${name}.db`),
    fetch: counting,
    push: { enabled: name === 'push' },
    onEvent: (event) => {
      if (event.type === 'closed' && event.record.taskId) closedAt.set(event.record.taskId, now());
    },
  });
  return { name, client, sent, closedAt, nOf: new Map() };
}

const followers = [await follower('push'), await follower('polling')];
const atMs = offsets(tasks);
const handles: Array<Promise<unknown>> = [];
for (const each of followers) {
  for (let start = 0; start < tasks; start += SUBMIT_CONCURRENCY) {
    const batch = [];
    for (let n = start; n < Math.min(tasks, start + SUBMIT_CONCURRENCY); n++) {
      batch.push(
        each.client.callTool('timed', { n, client: each.name, atMs: atMs[n]! }).then((answer) => {
          if (!isTaskHandle(answer)) throw new Error('timed answered without a task');
          each.nOf.set(answer.taskId, n);
          handles.push(answer.outcome());
        }),
      );
    }
    await Promise.all(batch);
  }
}
// both clients follow everything (the push client on its stream) before any task finishes
await sleep(Math.max(500, pollMs));
release();
const deadline = now() + DEADLINE_MS;
while (followers.some((each) => each.closedAt.size < tasks) && now() < deadline) await sleep(50);

const rows = followers.map((each) => {
  const lateness: number[] = [];
  for (const [taskId, closed] of each.closedAt) {
    const n = each.nOf.get(taskId);
    const finished = n === undefined ? undefined : finishedAt.get(`${each.name}:${n}`);
    if (finished !== undefined) lateness.push(closed - finished);
  }
  lateness.sort((x, y) => x - y);
  return [
    each.name,
    String(lateness.length),
    fixed(percentile(lateness, 50), 1),
    fixed(percentile(lateness, 99), 1),
    fixed(lateness.at(-1) ?? Number.NaN, 1),
    fixed((each.sent.get('tasks/get') ?? 0) / tasks, 2),
    String(each.sent.get('subscriptions/listen') ?? 0),
  ];
});

console.log(`pushLateness · ${machineLine()}`);
console.log(`${tasks} tasks per client, pollIntervalMs ${pollMs}, finishing over ${spreadMs} ms, SQLite store`);
console.log(table(['client', 'closed', 'lateness p50 ms', 'p99 ms', 'max ms', 'tasks/get per task', 'listens'], rows));

for (const each of followers) await each.client.close();
await Promise.allSettled(handles);
await serving.close();
await store.close();
rmSync(dir, { recursive: true, force: true });
if (followers.some((each) => each.closedAt.size < tasks)) {
  console.error('pushLateness: not every task closed out before the deadline');
  process.exit(1);
}
