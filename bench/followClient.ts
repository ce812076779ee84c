/**
 * One client process of the client benchmarks, told what to do by its parent (argv JSON, IPC messages back):
 * - `follow`: submit one `sleep` task per offset, report `submitted`, then follow every task to its outcome and report
 *   the CPU, memory and the moment each task was closed out;
 * - `submit`: submit and report, then idle until killed (the crash before a resume);
 * - `resume`: open the ledger a killed `submit` process left and `resumeAll()`, then idle until killed.
 * `kind` picks the client: Closeout's TaskClient on a SQLite ledger, or the official @modelcontextprotocol/ext-tasks.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { RawClientDispatch } from '@modelcontextprotocol/ext-tasks/client';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';
import { connectHttpTaskClient, isTaskHandle, type TaskClient } from 'closeout/client';

import { SLEEP_TOOL } from './clockworkServer.js';
import { PROTOCOL_VERSION } from './wire.js';

export interface FollowClientConfig {
  kind: 'closeout' | 'ext-tasks';
  mode: 'follow' | 'submit' | 'resume';
  url: string;
  group: string;
  offsetsMs: number[];
  /** Closeout only. */
  ledgerPath?: string;
  leaseMs?: number;
  /** Calls in flight while submitting. */
  submitConcurrency: number;
}

export type FollowClientMessage =
  | { type: 'ready'; rssBytes: number }
  | { type: 'submitted'; submitMs: number; cpuUs: number }
  | {
      type: 'done';
      followMs: number;
      cpuUs: number;
      maxRssBytes: number;
      /** taskId -> epoch ms at which the client had the outcome. */
      closedAt: Record<string, number>;
      notCompleted: number;
    }
  | { type: 'resumed'; sinceStartMs: number; resumed: number };

const CLIENT_INFO = { name: 'closeout-bench', version: '0.0.0' };
const SELF = fileURLToPath(import.meta.url);

// ---- the parent side -----------------------------------------------------------------------------------------------

export interface FollowClientProcess {
  child: ChildProcess;
  /** Resolves with the next message of this type (rejects if the process exits first). */
  next<T extends FollowClientMessage['type']>(type: T): Promise<Extract<FollowClientMessage, { type: T }>>;
  kill(): Promise<void>;
}

export function startFollowClient(config: FollowClientConfig): FollowClientProcess {
  const child = fork(SELF, [JSON.stringify(config)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const received: FollowClientMessage[] = [];
  const waiting: { type: string; resolve: (message: FollowClientMessage) => void; reject: (e: Error) => void }[] = [];
  child.on('message', (message: FollowClientMessage) => {
    const at = waiting.findIndex((w) => w.type === message.type);
    if (at >= 0) waiting.splice(at, 1)[0]!.resolve(message);
    else received.push(message);
  });
  child.once('exit', (code, signal) => {
    for (const w of waiting.splice(0))
      w.reject(new Error(`${config.kind} client exited (${signal ?? code}) before ${w.type}`));
  });
  return {
    child,
    next: (type) =>
      new Promise((resolve, reject) => {
        const at = received.findIndex((m) => m.type === type);
        if (at >= 0) return resolve(received.splice(at, 1)[0] as never);
        if (child.exitCode !== null || child.signalCode !== null) {
          return reject(new Error(`${config.kind} client exited before ${type}`));
        }
        waiting.push({ type, resolve: resolve as never, reject });
      }),
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

// ---- the child side ------------------------------------------------------------------------------------------------

// the child's own configuration (in the parent, importing this module, it stays unread)
const config = (process.argv[1] === SELF ? JSON.parse(process.argv[2] ?? '{}') : {}) as FollowClientConfig;
const send = (message: FollowClientMessage) =>
  new Promise<void>((resolve, reject) =>
    process.send!(message, undefined, {}, (error) => (error ? reject(error) : resolve())),
  );
const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

async function eachConcurrently<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

/** Submits every task, then hands back a promise per task that resolves with its taskId when it is closed out. */
type Submitter = (offsetMs: number) => Promise<{ taskId: string; closed: Promise<boolean> }>;

async function closeoutClient(): Promise<{ submit: Submitter; client: TaskClient }> {
  const client = await connectHttpTaskClient(config.url, {
    ledger: config.ledgerPath!,
    ...(config.leaseMs !== undefined && { leaseMs: config.leaseMs }),
    // the bench loads many tasks at once: let polls overlap as the server allows
    pollPolicy: { maxConcurrentPolls: 32 },
  });
  const submit: Submitter = async (offsetMs) => {
    const answer = await client.callTool(SLEEP_TOOL, { group: config.group, offsetMs });
    if (!isTaskHandle(answer)) throw new Error('the server answered without a task');
    return { taskId: answer.taskId, closed: answer.outcome().then((outcome) => outcome.kind === 'completed') };
  };
  return { submit, client };
}

async function extTasksClient(): Promise<{ submit: Submitter }> {
  // the package's documented setup for a 2026-07-28 server (as test/e2e/clientInterop.test.ts does it)
  const rawDispatch: RawClientDispatch = async (request, options) => {
    const body: Record<string, unknown> = { jsonrpc: '2.0', id: crypto.randomUUID(), ...(request as object) };
    const params = (body['params'] ?? {}) as Record<string, unknown>;
    const name = params['name'] ?? params['taskId'];
    const response = await fetch(config.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': PROTOCOL_VERSION,
        'mcp-method': String(body['method']),
        ...(typeof name === 'string' ? { 'mcp-name': name } : {}),
      },
      body: JSON.stringify(body),
      ...(options?.signal ? { signal: options.signal } : {}),
    });
    const message = (await response.json()) as { result?: never; error?: never };
    return message.error !== undefined
      ? { kind: 'error', error: message.error }
      : { kind: 'result', result: message.result! };
  };
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(config.url)));
  const session = createTaskSessionFromClient(client, {
    endpointId: `closeout-bench-${config.group}`,
    rawDispatch,
    v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo: CLIENT_INFO, clientCapabilities: {} },
  });
  const submit: Submitter = async (offsetMs) => {
    const execution = await session.callTool(SLEEP_TOOL, { group: config.group, offsetMs });
    if (execution.kind !== 'task') throw new Error('the server answered without a task');
    const taskId = (execution as unknown as { handle: { taskId: string } }).handle.taskId;
    return { taskId, closed: execution.settle().then(({ outcome }) => outcome.status === 'completed') };
  };
  return { submit };
}

async function main(): Promise<void> {
  if (config.mode === 'resume') {
    const { client } = await closeoutClient();
    const report = await client.resumeAll();
    // performance.now() counts from this process's start
    await send({ type: 'resumed', sinceStartMs: performance.now(), resumed: report.resumed.length });
    return; // idles, following, until the parent kills it
  }
  const { submit } = config.kind === 'closeout' ? await closeoutClient() : await extTasksClient();
  await send({ type: 'ready', rssBytes: process.memoryUsage().rss });

  const cpuBefore = cpuNow();
  const submitStart = performance.now();
  const followed: { taskId: string; closed: Promise<boolean> }[] = [];
  await eachConcurrently(config.offsetsMs, config.submitConcurrency, async (offsetMs) => {
    followed.push(await submit(offsetMs));
  });
  const cpuSubmitted = cpuNow();
  const followStart = performance.now();
  await send({ type: 'submitted', submitMs: followStart - submitStart, cpuUs: cpuSubmitted - cpuBefore });
  if (config.mode === 'submit') return;

  const closedAt: Record<string, number> = {};
  let notCompleted = 0;
  await Promise.all(
    followed.map(async ({ taskId, closed }) => {
      if (!(await closed)) notCompleted++;
      closedAt[taskId] = Date.now();
    }),
  );
  await send({
    type: 'done',
    followMs: performance.now() - followStart,
    cpuUs: cpuNow() - cpuSubmitted,
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
    closedAt,
    notCompleted,
  });
  // the clients keep timers (leases, sessions) alive: this process is done
  process.exit(0);
}

if (process.argv[1] === SELF) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exit(1);
  });
}
