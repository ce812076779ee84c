/**
 * One client process of the client benchmarks, told what to do by its parent (argv JSON, IPC messages back):
 * - `follow`: submit one `sleep` task per offset, report `submitted`, then follow every task to its outcome and report
 *   the CPU, memory and the moment each task was closed out; a `sample` message from the parent at any time is
 *   answered with the CPU and memory used so far (the parent measures the wait before it releases the tasks);
 * - `submit`: submit and report, then idle until killed (the crash before a resume);
 * - `resume`: open the ledger a killed `submit` process left and `resumeAll()`, then idle until killed (kind `sdk`:
 *   the SDK alone re-queries the ledger's open tasks, `sdkAloneResume`);
 * - `fleet`: one worker of a fleet on a shared PostgreSQL ledger: submit and report like `follow`, then
 *   follow its own tasks and take over those of workers that stop renewing (`takeOverEveryMs`) until killed;
 * - `floor`: what one tasks/get costs the client alone, with no ledger and no scheduler: through the SDK Client on the
 *   fetch the TaskClient uses, and as raw HTTP with prebuilt bytes (undici), reported as CPU µs per request.
 * `kind` picks the client: Closeout's TaskClient on a SQLite ledger, the official @modelcontextprotocol/ext-tasks, or
 * (`follow` only) the SDK alone, the floor under any client built on it (`sdkAloneClient`).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { Client, isJSONRPCResultResponse, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';
import Database from 'better-sqlite3';
import { connectHttpTaskClient, DEFAULT_POLL_POLICY, isTaskHandle, type TaskClient } from 'closeout/client';
import { Agent } from 'undici';
import * as z from 'zod/v4';

import { checkTask } from '../src/client/following/taskRequests.js';
import { createHttpFetch } from '../src/client/transport/httpFetch.js';
import { attachTaskResultCarrier } from '../src/client/transport/sdkGlue.js';
import { TaskGetFastPath } from '../src/client/transport/taskGetFastPath.js';
import { streamableHttpDispatch } from '../test/support/extTasksDispatch.js';
import { PROTOCOL_VERSION, TASKS, wireRequest } from '../test/support/rpc.js';
import { childMailbox } from './childMailbox.js';
import { SLEEP_TOOL } from './clockworkServer.js';
import { cpuNow, median } from './figures.js';
import { countMajorCollections } from './majorCollections.js';

export interface FollowClientConfig {
  kind: 'closeout' | 'ext-tasks' | 'sdk';
  mode: 'follow' | 'submit' | 'resume' | 'floor' | 'fleet';
  url: string;
  group: string;
  offsetsMs: number[];
  /** Closeout only: a SQLite file, or a postgres:// connection string (a fleet's shared ledger). */
  ledgerPath?: string;
  leaseMs?: number;
  /** `fleet`: how often the worker takes over records whose lease ran out. */
  takeOverEveryMs?: number;
  /** Polls in flight at once. Default 32. */
  maxConcurrentPolls?: number;
  /** Closeout only: poll on the fast path (taskGetFastPath.ts). Default true. */
  pollFastPath?: boolean;
  /** Closeout only: each call also carries a `padding` argument of this many characters (what the ledger keeps). */
  argumentBytes?: number;
  /** Calls in flight while submitting. */
  submitConcurrency: number;
  /** Node flags of the client process (e.g. a heap cap). */
  execArgv?: string[];
  /** `floor` only: requests per variant and round. */
  floorRequests?: number;
  /** `floor` only: the rate of the paced raw variant, polls a second (a waiting TaskClient's rate). */
  floorPacedPerSecond?: number;
  /** `floor` only: the grid the paced raw variant starts its requests on (the scheduler's, `pollGridMs`). */
  floorPacedGridMs?: number;
  /** `floor` only: measure the raw requests back to back only (the server's rate), none of the paced variants. */
  floorUnpaced?: boolean;
}

export type FollowClientMessage =
  /** `liveHeapBytes`: V8's used heap right after a full collection. */
  | { type: 'ready'; rssBytes: number; liveHeapBytes: number }
  /** `cpuUs`: spent submitting; `*TotalUs`: the process's CPU time so far. */
  /** `majorGcs`: V8's full collections so far, as in `sample`. */
  /** `maxRssBytes`: the process's peak RSS so far. */
  | { type: 'submitted'; submitMs: number; cpuUs: number; cpuTotalUs: number; majorGcs: number; maxRssBytes: number }
  | {
      type: 'done';
      followMs: number;
      cpuTotalUs: number;
      maxRssBytes: number;
      /** taskId -> epoch ms at which the client had the outcome. */
      closedAt: Record<string, number>;
      notCompleted: number;
    }
  | { type: 'resumed'; sinceStartMs: number; resumed: number }
  /** `majorGcs`, `majorGcMs`: V8's full collections so far (a forced one included), and their main-thread pauses. */
  | {
      type: 'sample';
      cpuTotalUs: number;
      rssBytes: number;
      /** The process's peak RSS so far, and V8's heap (committed, and in use) now. */
      maxRssBytes: number;
      heapTotalBytes: number;
      heapUsedBytes: number;
      liveHeapBytes: number | undefined;
      majorGcs: number;
      majorGcMs: number;
    }
  /** Answers `profile` (start, or stop and write the `.cpuprofile` to `path`). */
  | { type: 'profiled' }
  /** `rawPerSecond`: raw requests answered per second, 16 in flight: the server's rate for a cheap client. */
  /** `rawPacedCpuUsPerRequest`: the same raw requests paced as a waiting TaskClient sends them (see `paced`). */
  /** `fastPacedCpuUsPerRequest`: the TaskClient's poll fast path alone, paced alike (its requests, no bookkeeping). */
  /**
   * `checkedPacedCpuUsPerRequest`: the raw requests paced alike, each answer checked as every answer of a TaskClient
   * is (the SDK's JSON-RPC result schema, then the task's own check): the least a poll does with one set of schemas
   * (bench/RESULTS.md section 25).
   */
  | {
      type: 'floor';
      sdkCpuUsPerRequest: number;
      rawCpuUsPerRequest: number;
      rawPerSecond: number;
      rawPacedCpuUsPerRequest: number;
      fastPacedCpuUsPerRequest: number;
      checkedPacedCpuUsPerRequest: number;
    };

const CLIENT_INFO = { name: 'closeout-bench', version: '0.0.0' };
const SELF = fileURLToPath(import.meta.url);

// ---- the parent side -----------------------------------------------------------------------------------------------

export interface FollowClientProcess {
  child: ChildProcess;
  /** The process's CPU time and RSS now. */
  /** With `collect`, after a full collection, so the sample says what the process keeps. */
  sample(collect?: boolean): Promise<Extract<FollowClientMessage, { type: 'sample' }>>;
  /** Resolves with the next message of this type (rejects if the process exits first). */
  next<T extends FollowClientMessage['type']>(type: T): Promise<Extract<FollowClientMessage, { type: T }>>;
  /**
   * Start the inspector's CPU profiler in the child, or stop it and write the profile to `path` (a `.cpuprofile`).
   * `promoted`: V8's sampling heap profiler instead, counting only what outlived the young generation (objects a
   * scavenge collects are left out, those a full collection collects kept): a `.heapprofile` of what grows the old
   * generation between full collections.
   */
  profile(action: 'start' | 'stop', path?: string, kind?: 'cpu' | 'promoted'): Promise<void>;
  kill(): Promise<void>;
}

export function startFollowClient(config: FollowClientConfig): FollowClientProcess {
  const child = fork(SELF, [JSON.stringify(config)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // gc() on request only (live heap samples); the flag changes nothing else about the collector
    execArgv: ['--expose-gc', ...(config.execArgv ?? [])],
  });
  const next: FollowClientProcess['next'] = childMailbox<FollowClientMessage>(child, config.kind);
  return {
    child,
    next,
    sample: (collect = false) => {
      const answer = next('sample');
      child.send({ type: 'sample', collect });
      return answer;
    },
    profile: async (action, path, kind = 'cpu') => {
      const answer = next('profiled');
      child.send({ type: 'profile', action, path, kind });
      await answer;
    },
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
/** The used heap after a full collection (the process runs with --expose-gc). */
const liveHeap = () => {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
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
    ...(config.takeOverEveryMs !== undefined && { takeOverEveryMs: config.takeOverEveryMs }),
    // the bench loads many tasks at once: let polls overlap as the server allows
    pollPolicy: { maxConcurrentPolls: config.maxConcurrentPolls ?? 32 },
    pollFastPath: config.pollFastPath ?? true,
  });
  const padding = config.argumentBytes ? { padding: 'x'.repeat(config.argumentBytes) } : {};
  const submit: Submitter = async (offsetMs) => {
    const answer = await client.callTool(SLEEP_TOOL, { group: config.group, offsetMs, ...padding });
    if (!isTaskHandle(answer)) throw new Error('the server answered without a task');
    // a handle another worker of a fleet took over rejects (leased-elsewhere): not closed out here
    const closed = answer.outcome().then(
      (outcome) => outcome.kind === 'completed',
      () => false,
    );
    return { taskId: answer.taskId, closed };
  };
  return { submit, client };
}

async function extTasksClient(): Promise<{ submit: Submitter }> {
  // the package's documented setup for a 2026-07-28 server (as test/e2e/clientInterop.test.ts does it)
  const rawDispatch = streamableHttpDispatch(() => config.url);
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

/**
 * The floor of following N tasks through the SDK: its Client and transport on the same fetch, plus the one piece of glue
 * a client of this SDK needs to be handed a task at all (sdkGlue's carrier: the SDK's 2026 codec refuses
 * `resultType: "task"`). Per task it keeps the taskId and one pending poll, asks `tasks/get` at the interval the server
 * suggests until a terminal status, and nothing else: no ledger, no validation beyond the SDK's, no retries, no
 * backstop. What it spends is what the SDK spends; nobody should run it as a client.
 */
async function sdkAloneClient(): Promise<{ submit: Submitter }> {
  const http = createHttpFetch();
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  const transport = new StreamableHTTPClientTransport(new URL(config.url), { fetch: http.fetch });
  const carrier = attachTaskResultCarrier(transport);
  await client.connect(transport);
  const _meta = { 'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } } };
  const AnyResult = z.looseObject({});
  const submit: Submitter = async (offsetMs) => {
    let created: Record<string, unknown> | undefined;
    try {
      await client.callTool({ name: SLEEP_TOOL, arguments: { group: config.group, offsetMs }, _meta });
    } catch (error) {
      created = carrier.extract(error);
      if (!created) throw error;
    }
    if (!created) throw new Error('the server answered without a task');
    const taskId = created['taskId'] as string;
    let pollMs = Number(created['pollIntervalMs'] ?? 1000);
    const closed = (async () => {
      for (;;) {
        await sleep(pollMs);
        const task = await client
          .request({ method: 'tasks/get', params: { taskId, _meta } }, AnyResult)
          .catch(() => undefined);
        if (!task) continue;
        if (typeof task['pollIntervalMs'] === 'number') pollMs = task['pollIntervalMs'];
        if (task['status'] === 'completed') return true;
        if (task['status'] === 'failed' || task['status'] === 'cancelled') return false;
      }
    })();
    return { taskId, closed };
  };
  return { submit };
}

/**
 * The floor of a resume through the SDK: a fresh process reads the open records' taskIds from the ledger file a killed
 * TaskClient left (one SELECT, read-only) and asks `tasks/get` for each through the SDK's Client, as many in flight as
 * the TaskClient's polls in this benchmark. No leases, no records written, no validation beyond the SDK's.
 */
async function sdkAloneResume(): Promise<void> {
  const ledger = new Database(config.ledgerPath!, { readonly: true });
  const taskIds = ledger
    .prepare(`SELECT task_id FROM submissions WHERE local_state = 'tracking' AND task_id IS NOT NULL`)
    .pluck()
    .all() as string[];
  ledger.close();
  const http = createHttpFetch();
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(config.url), { fetch: http.fetch }));
  await send({ type: 'resumed', sinceStartMs: performance.now(), resumed: taskIds.length });
  const _meta = { 'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } } };
  const AnyResult = z.looseObject({});
  await eachConcurrently(taskIds, config.maxConcurrentPolls ?? 32, async (taskId) => {
    await client.request({ method: 'tasks/get', params: { taskId, _meta } }, AnyResult);
  });
}

/** How many floor requests are in flight at once. */
const FLOOR_CONCURRENCY = 16;

/** Client CPU µs per request, and requests per second. */
async function cpuPerRequest(request: () => Promise<unknown>): Promise<{ cpuUs: number; perSecond: number }> {
  const runAll = async (count: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: FLOOR_CONCURRENCY }, async () => {
        while (next++ < count) await request();
      }),
    );
  };
  const requests = config.floorRequests ?? 3000;
  await runAll(requests / 3); // warm-up
  const before = cpuNow();
  const start = performance.now();
  await runAll(requests);
  return { cpuUs: (cpuNow() - before) / requests, perSecond: (requests / (performance.now() - start)) * 1000 };
}

/**
 * Client CPU µs per request when the requests are paced as a waiting TaskClient sends them: `floorPacedPerSecond` a
 * second, started together on the scheduler's grid (`floorPacedGridMs`, by default DEFAULT_POLL_POLICY.tickMs), at
 * most FLOOR_CONCURRENCY in flight. Back to back (`cpuPerRequest`) one wake-up of the process serves many answers;
 * paced, each tick pays its own.
 */
async function paced(request: () => Promise<unknown>): Promise<number> {
  const perSecond = config.floorPacedPerSecond ?? 333;
  const tickMs = config.floorPacedGridMs ?? DEFAULT_POLL_POLICY.tickMs;
  const perTick = Math.max(1, Math.round((perSecond * tickMs) / 1000));
  const requests = config.floorRequests ?? 3000;
  const ticks = Math.max(1, Math.ceil(requests / perTick));
  const before = cpuNow();
  const pending: Promise<void>[] = [];
  for (let tick = 0; tick < ticks; tick++) {
    let left = perTick;
    pending.push(
      Promise.all(
        Array.from({ length: Math.min(FLOOR_CONCURRENCY, perTick) }, async () => {
          while (left-- > 0) await request();
        }),
      ).then(() => undefined),
    );
    await sleep(tickMs);
  }
  await Promise.all(pending);
  return (cpuNow() - before) / (ticks * perTick);
}

async function floor(): Promise<void> {
  // one task of our own to ask about (its group keeps it out of the clients' counts)
  const created = (await (
    await fetch(config.url, {
      method: 'POST',
      ...wireRequest(
        'tools/call',
        { name: SLEEP_TOOL, arguments: { group: config.group, offsetMs: 0 } },
        { declareTasks: true },
      ),
    })
  ).json()) as { result: { taskId: string } };
  const taskId = created.result.taskId;
  const meta = {
    'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
  };

  const http = createHttpFetch();
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(config.url), { fetch: http.fetch }));
  const AnyResult = z.looseObject({});
  const sdk = () => client.request({ method: 'tasks/get', params: { taskId, _meta: meta } }, AnyResult);

  const agent = new Agent({ keepAliveTimeout: 60_000 });
  const wire = wireRequest('tasks/get', { taskId }, { declareTasks: true });
  const raw = async () => {
    const response = await agent.request({
      origin: new URL(config.url).origin,
      path: new URL(config.url).pathname,
      method: 'POST',
      headers: wire.headers,
      body: wire.body,
    });
    return JSON.parse(await response.body.text()) as unknown;
  };
  // the same, and the answer checked as a TaskClient checks every answer, whichever path it came by: the SDK's own
  // JSON-RPC result schema (one set of schemas: bench/RESULTS.md section 25), then the task's fields (serverOutput.ts)
  const checked = async () => {
    const message = await raw();
    if (!isJSONRPCResultResponse(message)) throw new Error('tasks/get: the answer is not a JSON-RPC result');
    const { resultType: _resultType, ...result } = message.result;
    const query = checkTask(result, taskId);
    if (query.kind !== 'task') throw new Error(`tasks/get: ${query.error.message}`);
  };

  // the TaskClient's poll fast path alone (src/client/transport/taskGetFastPath.ts) on a pool of its own, taught by an
  // SDK client of its own as a TaskClient's is: what a waiting poll's request costs without the bookkeeping around it
  const fastHttp = createHttpFetch();
  const fastPath = new TaskGetFastPath(fastHttp, new URL(config.url), undefined);
  const teacher = new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await teacher.connect(
    new StreamableHTTPClientTransport(new URL(config.url), { fetch: fastPath.observe(fastHttp.fetch) }),
  );
  const learn = () =>
    fastPath.throughSdk(taskId, () =>
      teacher.request({ method: 'tasks/get', params: { taskId, _meta: meta } }, AnyResult),
    );
  // an answer it does not decide (none here, but for a template older than its life) is asked through the SDK, as
  // a TaskClient asks it
  const fast = async () => (await fastPath.get(taskId, meta, 30_000)) ?? (await learn());

  const sdkRounds: { cpuUs: number; perSecond: number }[] = [];
  const rawRounds: { cpuUs: number; perSecond: number }[] = [];
  const pacedRounds: number[] = [];
  const fastPacedRounds: number[] = [];
  const checkedPacedRounds: number[] = [];
  for (let round = 0; round < 3; round++) {
    sdkRounds.push(await cpuPerRequest(sdk));
    rawRounds.push(await cpuPerRequest(raw));
    if (config.floorUnpaced) continue;
    pacedRounds.push(await paced(raw));
    checkedPacedRounds.push(await paced(checked));
    await learn();
    fastPacedRounds.push(await paced(fast));
  }
  await send({
    type: 'floor',
    sdkCpuUsPerRequest: median(sdkRounds.map((r) => r.cpuUs)),
    rawCpuUsPerRequest: median(rawRounds.map((r) => r.cpuUs)),
    rawPerSecond: median(rawRounds.map((r) => r.perSecond)),
    rawPacedCpuUsPerRequest: median(pacedRounds),
    fastPacedCpuUsPerRequest: median(fastPacedRounds),
    checkedPacedCpuUsPerRequest: median(checkedPacedRounds),
  });
  await teacher.close();
  await fastHttp.close();
  await client.close();
  await agent.close();
  process.exit(0);
}

async function main(): Promise<void> {
  let profiler: Session | undefined;
  const majorGc = countMajorCollections();
  type Message = { type?: string; collect?: boolean; action?: string; path?: string; kind?: string };
  process.on('message', (message: Message) => {
    if (message.type === 'profile') {
      const promoted = message.kind === 'promoted';
      void (async () => {
        if (message.action === 'start') {
          profiler = new Session();
          profiler.connect();
          if (promoted) {
            await profiler.post('HeapProfiler.enable');
            await profiler.post('HeapProfiler.startSampling', {
              samplingInterval: 16_384,
              includeObjectsCollectedByMajorGC: true,
              includeObjectsCollectedByMinorGC: false,
            });
          } else {
            await profiler.post('Profiler.enable');
            await profiler.post('Profiler.start');
          }
        } else if (profiler) {
          const { profile } = promoted
            ? await profiler.post('HeapProfiler.stopSampling')
            : await profiler.post('Profiler.stop');
          writeFileSync(message.path!, JSON.stringify(profile));
          profiler.disconnect();
          profiler = undefined;
        }
        await send({ type: 'profiled' });
      })();
    }
    if (message.type === 'sample') {
      // the collection first, so its CPU is before the CPU time reported
      const liveHeapBytes = message.collect ? liveHeap() : undefined;
      const memory = process.memoryUsage();
      void send({
        type: 'sample',
        cpuTotalUs: cpuNow(),
        rssBytes: memory.rss,
        maxRssBytes: process.resourceUsage().maxRSS * 1024,
        heapTotalBytes: memory.heapTotal,
        heapUsedBytes: memory.heapUsed,
        liveHeapBytes,
        majorGcs: majorGc.count,
        majorGcMs: majorGc.ms,
      });
    }
  });
  if (config.mode === 'floor') return floor();
  if (config.mode === 'resume' && config.kind === 'sdk') return sdkAloneResume();
  if (config.mode === 'resume') {
    const { client } = await closeoutClient();
    const report = await client.resumeAll();
    // performance.now() counts from this process's start
    await send({ type: 'resumed', sinceStartMs: performance.now(), resumed: report.resumed.length });
    return; // idles, following, until the parent kills it
  }
  const { submit } =
    config.kind === 'closeout'
      ? await closeoutClient()
      : config.kind === 'sdk'
        ? await sdkAloneClient()
        : await extTasksClient();
  await send({ type: 'ready', rssBytes: process.memoryUsage().rss, liveHeapBytes: liveHeap() });

  const cpuBefore = cpuNow();
  const submitStart = performance.now();
  const followed: { taskId: string; closed: Promise<boolean> }[] = [];
  await eachConcurrently(config.offsetsMs, config.submitConcurrency, async (offsetMs) => {
    followed.push(await submit(offsetMs));
  });
  const cpuSubmitted = cpuNow();
  const followStart = performance.now();
  await send({
    type: 'submitted',
    submitMs: followStart - submitStart,
    cpuUs: cpuSubmitted - cpuBefore,
    cpuTotalUs: cpuSubmitted,
    majorGcs: majorGc.count,
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
  });
  if (config.mode === 'submit' || config.mode === 'fleet') return;

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
    cpuTotalUs: cpuNow(),
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
