/**
 * Serving a TaskServer over Streamable HTTP: `createMcpHandler` builds a fresh SDK server per request, so every piece
 * of task state lives in the store, and any instance answers any request.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { toNodeHandler } from '@modelcontextprotocol/node';
import type { AuthInfo, McpHttpHandler, McpRequestContext, ServerEventBus } from '@modelcontextprotocol/server';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';

import { CLIENT_CAPABILITIES_META_KEY } from '../protocol/constants.js';
import { guardJsonDepth } from './jsonDepthGuard.js';
import { type AttachOptions, attachTasks, declaresTasksIn, defaultPrincipal } from './sdkGlue.js';
import { mayBeTaskGet, taskGetFastPath } from './taskGetFastPath.js';
import { taskListenOf } from './taskPush.js';
import type { TaskServer } from './taskServer.js';

const DEFAULT_SERVER_INFO = { name: 'closeout', version: '0.1.0' };

/** The Node response an exchange is served on, when serveTaskServer serves it: a push stream cut ends its socket. */
const servingResponse = new AsyncLocalStorage<ServerResponse>();

export interface TaskHandlerOptions extends AttachOptions {
  /** Name and version the server reports. */
  serverInfo?: { name: string; version: string };
  /** Registers the server's ordinary tools, resources and prompts on each per-request instance. */
  setup?: (mcp: McpServer, ctx: McpRequestContext) => void;
  onerror?: (error: Error) => void;
  /** The change-event bus `subscriptions/listen` streams subscribe to (publish list changes on it). Default in-process. */
  bus?: ServerEventBus;
}

/** A web-standard `{ fetch }` MCP handler serving the task tools of `tasks` beside whatever `setup` registers. */
export function createTaskMcpHandler(tasks: TaskServer, options: TaskHandlerOptions = {}): McpHttpHandler {
  const info = options.serverInfo ?? DEFAULT_SERVER_INFO;
  const principalOf = options.principal ?? defaultPrincipal;
  /** Listen requests for task notifications on their way through the SDK, and the principal once it accepted them. */
  const taskListens = new WeakMap<Request, { principal?: string }>();
  const handler = createMcpHandler(
    (ctx) => {
      // the SDK builds a server only for a request that passed its checks (protocol version, headers, envelope)
      // (modern era only: subscriptions/listen does not exist in the 2025 protocol the legacy leg serves)
      const listen = ctx.era === 'modern' && ctx.requestInfo && taskListens.get(ctx.requestInfo);
      if (listen) listen.principal = principalOf({ authInfo: ctx.authInfo });
      const mcp = new McpServer(info);
      options.setup?.(mcp, ctx);
      attachTasks(mcp, tasks, options);
      return mcp;
    },
    { ...(options.onerror && { onerror: options.onerror }), ...(options.bus && { bus: options.bus }) },
  );
  // `subscriptions/listen` with `notifications.taskIds`: the SDK's listen router cannot carry notifications/tasks
  // (sdk-v2 notes), so the SDK checks the request as it checks any other, and taskPush.ts serves the stream
  const withPush: McpHttpHandler = {
    ...handler,
    fetch: async (request, requestOptions) => {
      const listen = taskListenOf(requestOptions?.parsedBody);
      if (!listen) return handler.fetch(request, requestOptions);
      const accepted: { principal?: string } = {};
      taskListens.set(request, accepted);
      const sdkAnswer = await handler.fetch(request, requestOptions);
      // refused before a server was built (a bad version, header or envelope): the SDK's refusal stands
      if (accepted.principal === undefined) return sdkAnswer;
      await sdkAnswer.body?.cancel().catch(() => {});
      const meta = listen.params._meta;
      const res = servingResponse.getStore();
      return tasks.push.listen(
        listen,
        accepted.principal,
        declaresTasksIn(meta?.[CLIENT_CAPABILITIES_META_KEY]),
        request.signal,
        info,
        res && (() => res.destroy()),
      );
    },
  };
  // hostile nesting is refused before the SDK's recursive validation can overflow the stack
  return guardJsonDepth(withPush);
}

export interface ServeOptions extends TaskHandlerOptions {
  port?: number;
  host?: string;
  /** The HTTP path of the endpoint. Default `/mcp`. */
  path?: string;
  /** Bearer tokens and the principal each stands for; when given, every request must carry one (else 401). */
  tokens?: Record<string, string>;
  /**
   * @internal Answer ordinary `tasks/get` requests without the SDK's per-request server (taskGetFastPath.ts). Default
   * true; the differential test turns it off to compare the two paths.
   */
  taskGetFastPath?: boolean;
}

export interface ServingTaskServer {
  url: string;
  http: HttpServer;
  close(): Promise<void>;
}

/**
 * A Node request handler serving task tools: Node's own request and response (from `node:http`, Express, any framework
 * that hands them over), and `parsedBody` when a framework parsed the body already (Express's `req.body`). `close()`
 * ends what the handler holds (not `tasks`).
 */
export type TaskNodeHandler = ((req: IncomingMessage, res: ServerResponse, parsedBody?: unknown) => Promise<void>) & {
  close(): Promise<void>;
};

/**
 * `createTaskMcpHandler` for Node's request and response, on the SDK's Node adapter. The adapter's structural request
 * type does not take Node's `IncomingMessage` under `exactOptionalPropertyTypes` (its optional fields are not
 * `| undefined`), so this takes Node's own types, and every caller is spared the cast. A push stream that ends ends
 * its response's socket, as under serveTaskServer.
 */
export function createTaskNodeHandler(tasks: TaskServer, options: TaskHandlerOptions = {}): TaskNodeHandler {
  const handler = createTaskMcpHandler(tasks, options);
  const node = toNodeHandler(handler, { ...(options.onerror && { onerror: options.onerror }) });
  type AdapterRequest = Parameters<typeof node>[0];
  const serve = (req: IncomingMessage, res: ServerResponse, parsedBody?: unknown) =>
    servingResponse.run(res, () => node(req as AdapterRequest, res, parsedBody));
  return Object.assign(serve, { close: () => handler.close() });
}

/** Starts `tasks` and serves it at `http://HOST:PORT/mcp`. */
export async function serveTaskServer(tasks: TaskServer, options: ServeOptions = {}): Promise<ServingTaskServer> {
  const path = options.path ?? '/mcp';
  const node = createTaskNodeHandler(tasks, options);
  const fastGet =
    options.taskGetFastPath === false
      ? undefined
      : taskGetFastPath(tasks, {
          serverInfo: options.serverInfo ?? DEFAULT_SERVER_INFO,
          principal: options.principal ?? defaultPrincipal,
        });
  await tasks.start();
  const http = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== path) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`Not found: the MCP endpoint is ${path}\n`);
      return;
    }
    const authInfo = options.tokens ? bearerAuth(req, options.tokens) : undefined;
    if (options.tokens && !authInfo) {
      res
        .writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' })
        .end(JSON.stringify({ error: 'invalid_token', error_description: 'A valid bearer token is required' }));
      return;
    }
    const nodeReq = authInfo ? Object.assign(req, { auth: authInfo }) : req;
    const serve = (request: IncomingMessage) => node(request, res);
    (fastGet && mayBeTaskGet(nodeReq) ? fastGet(nodeReq, res, authInfo, serve) : serve(nodeReq)).catch(
      (error: unknown) => {
        options.onerror?.(error instanceof Error ? error : new Error(String(error)));
        if (!res.headersSent) res.writeHead(500).end();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 3000, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = http.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}${path}`,
    http,
    close: async () => {
      // push streams end first, gracefully, while their connections can still carry the completion result
      await tasks.push.close();
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      });
      await node.close();
      await tasks.close();
    },
  };
}

function bearerAuth(req: IncomingMessage, tokens: Record<string, string>): AuthInfo | undefined {
  const header = req.headers.authorization ?? '';
  const match = /^Bearer\s+(.+)$/i.exec(header);
  const token = match?.[1]?.trim();
  if (!token || !Object.hasOwn(tokens, token)) return undefined;
  return { token, clientId: tokens[token]!, scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600 };
}
