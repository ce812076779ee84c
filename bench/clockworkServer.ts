/**
 * The server the client benchmarks follow tasks on: raw 2026-07-28 JSON-RPC over node:http (server/discover,
 * tools/call answering a CreateTaskResult, tasks/get), cheap enough that the clients, not it, are what is measured.
 * Its one tool (tools/list lists it), `sleep`, makes a task that stays `working` until `release()` and completes `offsetMs` after it, so
 * every task of a run is open at once; tasks of a run that is never released stay open. It counts, per task, every
 * tasks/get and every one that came after the client had already been told the task was terminal.
 */
import { randomBytes } from 'node:crypto';

import { discoverResult, type JsonRpcAnswer, startJsonRpcFixture } from '../test/support/jsonRpcFixture.js';
import { TASKS } from '../test/support/rpc.js';

export const SLEEP_TOOL = 'sleep';

export interface ClockworkTask {
  taskId: string;
  /** Which client made it (the `group` argument). */
  group: string;
  createdAt: number;
  offsetMs: number;
  /** `release()` time + offsetMs; undefined before the release. */
  completeAt: number | undefined;
  gets: number;
  /** When the first answer saying `completed` left. */
  terminalAnsweredAt: number | undefined;
  getsAfterTerminal: number;
  firstGetAt: number | undefined;
  lastGetAt: number | undefined;
}

export interface ClockworkServer {
  url: string;
  pollIntervalMs: number;
  tasks: Map<string, ClockworkTask>;
  /** From now on, each task completes `offsetMs` later. */
  release(): number;
  close(): Promise<void>;
}

export async function startClockworkServer(pollIntervalMs: number): Promise<ClockworkServer> {
  const tasks = new Map<string, ClockworkTask>();
  let releasedAt: number | undefined;

  const methods: Record<string, (params: Record<string, unknown>) => JsonRpcAnswer> = {
    'server/discover': () =>
      discoverResult({ tools: {}, extensions: { [TASKS]: {} } }, { name: 'clockwork', version: '1.0.0' }),
    'tools/list': () => ({
      result: {
        resultType: 'complete',
        // 2026-07-28 list results carry their cache hints
        ttlMs: 0,
        cacheScope: 'private',
        tools: [
          {
            name: SLEEP_TOOL,
            description: 'Completes offsetMs after the run is released',
            inputSchema: {
              type: 'object',
              properties: { group: { type: 'string' }, offsetMs: { type: 'number' }, padding: { type: 'string' } },
              required: ['group', 'offsetMs'],
            },
          },
        ],
      },
    }),
    'tools/call': (params) => create(params),
    'tasks/get': (params) => get(params),
  };

  function create(params: Record<string, unknown>) {
    const args = (params['arguments'] ?? {}) as { group?: unknown; offsetMs?: unknown };
    if (params['name'] !== SLEEP_TOOL || typeof args.offsetMs !== 'number') {
      return { error: { code: -32602, message: `call ${SLEEP_TOOL} with { group, offsetMs }` } };
    }
    const now = Date.now();
    const task: ClockworkTask = {
      taskId: randomBytes(16).toString('base64url'),
      group: String(args.group),
      createdAt: now,
      offsetMs: args.offsetMs,
      completeAt: releasedAt === undefined ? undefined : releasedAt + args.offsetMs,
      gets: 0,
      terminalAnsweredAt: undefined,
      getsAfterTerminal: 0,
      firstGetAt: undefined,
      lastGetAt: undefined,
    };
    tasks.set(task.taskId, task);
    return { result: { resultType: 'task', ...wireTask(task, now) } };
  }

  function get(params: Record<string, unknown>) {
    const task = tasks.get(String(params['taskId']));
    if (!task) return { error: { code: -32602, message: 'Failed to retrieve task: Task not found' } };
    const now = Date.now();
    task.gets++;
    task.firstGetAt ??= now;
    task.lastGetAt = now;
    const done = task.completeAt !== undefined && now >= task.completeAt;
    if (done) {
      if (task.terminalAnsweredAt === undefined) task.terminalAnsweredAt = now;
      else task.getsAfterTerminal++;
    }
    return { result: { resultType: 'complete', ...wireTask(task, now) } };
  }

  function wireTask(task: ClockworkTask, now: number) {
    const done = task.completeAt !== undefined && now >= task.completeAt;
    return {
      taskId: task.taskId,
      status: done ? 'completed' : 'working',
      createdAt: new Date(task.createdAt).toISOString(),
      lastUpdatedAt: new Date(done ? task.completeAt! : task.createdAt).toISOString(),
      ttlMs: null,
      pollIntervalMs,
      ...(done && {
        result: { resultType: 'complete', content: [{ type: 'text', text: `slept ${task.offsetMs} ms` }] },
      }),
    };
  }

  const fixture = await startJsonRpcFixture(
    (method, params) =>
      methods[method]?.(params) ?? { error: { code: -32601, message: `Method not found: ${method}` } },
  );
  fixture.server.keepAliveTimeout = 60_000;
  return {
    url: `${fixture.origin}/mcp`,
    pollIntervalMs,
    tasks,
    release: () => {
      releasedAt = Date.now();
      for (const task of tasks.values()) task.completeAt = releasedAt + task.offsetMs;
      return releasedAt;
    },
    close: () => fixture.close(),
  };
}
