/**
 * The servers the overhead benchmark loads, each on 127.0.0.1 and an ephemeral port: the physical floor (bare
 * node:http), a plain SDK McpServer without Closeout, and a Closeout TaskServer on a given store.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';

import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import {
  type ServeOptions,
  serveTaskServer,
  TaskServer,
  type TaskServerOptions,
  type TaskStore,
} from 'closeout/server';
import * as z from 'zod/v4';

export interface RunningServer {
  url: string;
  close(): Promise<void>;
}

/** The one tool every scenario calls: the same arguments, the same result. */
export const ECHO_TOOL = 'echo';
export const ECHO_ARGUMENTS = { text: 'hello' };
const EchoArgsSchema = z.object({ text: z.string() });
const echo = ({ text }: { text: string }) => ({ content: [{ type: 'text' as const, text }] });

/** A task tool whose handler runs until its task is cancelled or the server stops: a task that stays `working`. */
export const HOLD_TOOL = 'hold';

async function listen(http: HttpServer, path: string): Promise<RunningServer> {
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${path}`,
    close: () =>
      new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      }),
  };
}

/** (a) An SDK McpServer with no Closeout: createMcpHandler + toNodeHandler, one tool. */
export async function startPlainSdkServer(): Promise<RunningServer> {
  const handler = createMcpHandler(() => {
    const mcp = new McpServer({ name: 'plain-sdk', version: '0.0.0' });
    mcp.registerTool(ECHO_TOOL, { inputSchema: EchoArgsSchema }, echo);
    return mcp;
  });
  const node = toNodeHandler(handler);
  const server = await listen(
    createServer((req, res) => void node(req, res)),
    '/mcp',
  );
  return {
    url: server.url,
    close: async () => {
      await server.close();
      await handler.close();
    },
  };
}

/** The floor: reads the request body, answers with fixed bytes. No JSON, no MCP. */
export async function startFloorServer(responseBody: string, contentType: string): Promise<RunningServer> {
  const bytes = Buffer.from(responseBody);
  const headers = { 'content-type': contentType, 'content-length': String(bytes.length) };
  return listen(
    createServer((req, res) => {
      req.on('data', () => {});
      req.on('end', () => res.writeHead(200, headers).end(bytes));
    }),
    '/mcp',
  );
}

/**
 * (b), (c): Closeout over `store`, serving `echo` as an optional task tool and `hold`; `taskGetFastPath: false` serves
 * every `tasks/get` through the SDK's per-request server (c.sdk).
 */
export async function startCloseoutServer(
  store: TaskStore,
  telemetry?: TaskServerOptions['telemetry'],
  options: Pick<ServeOptions, 'taskGetFastPath'> & Pick<TaskServerOptions, 'maxStoredTasksPerPrincipal'> = {},
): Promise<RunningServer & { tasks: TaskServer; errors: Error[] }> {
  const { maxStoredTasksPerPrincipal, ...serve } = options;
  const errors: Error[] = [];
  const tasks = new TaskServer({
    store,
    onError: (error) => errors.push(error),
    ...(telemetry && { telemetry }),
    ...(maxStoredTasksPerPrincipal !== undefined && { maxStoredTasksPerPrincipal }),
  });
  tasks.registerTool(ECHO_TOOL, { inputSchema: EchoArgsSchema, task: { support: 'optional' } }, echo);
  tasks.registerTool(
    HOLD_TOOL,
    { task: { support: 'required', ttlMs: null } },
    (_args, ctx) =>
      new Promise((_resolve, reject) => {
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
      }),
  );
  const serving = await serveTaskServer(tasks, { port: 0, onerror: (error) => errors.push(error), ...serve });
  return { url: serving.url, tasks, errors, close: () => serving.close() };
}
