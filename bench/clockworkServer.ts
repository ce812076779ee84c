/**
 * The server the client benchmarks follow tasks on: raw 2026-07-28 JSON-RPC over node:http (server/discover,
 * tools/call answering a CreateTaskResult, tasks/get), cheap enough that the clients, not it, are what is measured.
 * Its one tool (tools/list lists it), `sleep`, makes a task that stays `working` until `release()` and completes `offsetMs` after it, so
 * every task of a run is open at once; tasks of a run that is never released stay open. It counts, per task, every
 * tasks/get and every one that came after the client had already been told the task was terminal.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { PROTOCOL_VERSION } from './wire.js';

const TASKS_EXTENSION_ID = 'io.modelcontextprotocol/tasks';
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

  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => res.writeHead(500).end(String(error)));
  });
  server.keepAliveTimeout = 60_000;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const chunk of req) body += String(chunk);
    if (req.method !== 'POST') return void res.writeHead(405).end();
    const message = JSON.parse(body) as { id?: string | number; method: string; params?: Record<string, unknown> };
    if (message.id === undefined) return void res.writeHead(202).end();
    const answer = dispatch(message.method, message.params ?? {});
    const reply = 'error' in answer ? { error: answer.error } : { result: answer.result };
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ jsonrpc: '2.0', id: message.id, ...reply }));
  }

  function dispatch(method: string, params: Record<string, unknown>) {
    switch (method) {
      case 'server/discover':
        return {
          result: {
            resultType: 'complete',
            supportedVersions: [PROTOCOL_VERSION],
            capabilities: { tools: {}, extensions: { [TASKS_EXTENSION_ID]: {} } },
            _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'clockwork', version: '1.0.0' } },
          },
        };
      case 'tools/list':
        return {
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
                  properties: { group: { type: 'string' }, offsetMs: { type: 'number' } },
                  required: ['group', 'offsetMs'],
                },
              },
            ],
          },
        };
      case 'tools/call':
        return create(params);
      case 'tasks/get':
        return get(params);
      default:
        return { error: { code: -32601, message: `Method not found: ${method}` } };
    }
  }

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

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    pollIntervalMs,
    tasks,
    release: () => {
      releasedAt = Date.now();
      for (const task of tasks.values()) task.completeAt = releasedAt + task.offsetMs;
      return releasedAt;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
