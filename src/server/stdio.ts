/**
 * A TaskServer over stdio (spec: basic/transports/stdio), for the hosts that start MCP servers as local processes:
 * the SDK's `serveStdio` owns the connection (a 2026-07-28 opening, or a 2025-era `initialize`), and every instance
 * it makes gets the Tasks extension through `attachTasks`. A host starts and kills such a server many times a day: the
 * tasks live in the store, so the next process on the same store knows every task the last one created.
 *
 * Push (`subscriptions/listen` with task notifications) is served on the same channel (stdioPush.ts). Nothing but
 * JSON-RPC goes to stdout; report with `onerror` (stderr by default). A host that closes stdin (or dies, breaking
 * stdout) ends the connection; `closed` then resolves, and the caller closes the TaskServer (its running tasks are handed back for
 * the next start to take up).
 */
import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio, StdioServerTransport } from '@modelcontextprotocol/server/stdio';

import type { TaskHandlerOptions } from './http.js';
import { attachTasks, defaultPrincipal } from './sdkGlue.js';
import { TaskListenTransport } from './stdioPush.js';
import type { TaskServer } from './taskServer.js';

export interface StdioServeOptions extends Pick<TaskHandlerOptions, 'serverInfo' | 'principal' | 'onerror'> {
  /** Registers the server's ordinary tools, resources and prompts on the connection's instance. */
  setup?: (mcp: McpServer) => void;
  /** Streams other than the process's own stdin and stdout (tests). */
  stdin?: NodeJS.ReadableStream;
  stdout?: NodeJS.WritableStream;
}

export interface StdioTaskServer {
  /** Resolves when the connection is over: the host closed stdin, or stdout broke. */
  closed: Promise<void>;
  /** Ends the connection, then the TaskServer. */
  close(): Promise<void>;
}

/**
 * @internal The SDK's stdio server transport on `stdin` and `stdout` (the process's own by default), and a promise
 * that resolves when the connection is over: the host closed stdin, or stdout broke (a host that dies closes both, and
 * a write can fail with EPIPE before stdin's end is read; the SDK transport then closes itself and stops reading
 * stdin, so its end would never be seen), or the transport closed for any other reason.
 */
export function stdioServerTransport(
  stdin: NodeJS.ReadableStream = process.stdin,
  stdout: NodeJS.WritableStream = process.stdout,
): { transport: StdioServerTransport; closed: Promise<void> } {
  let ended!: () => void;
  const closed = new Promise<void>((resolve) => (ended = resolve));
  stdin.once('end', ended);
  stdin.once('close', ended);
  const transport = new (class extends StdioServerTransport {
    override async close(): Promise<void> {
      await super.close();
      ended();
    }
  })(
    stdin as ConstructorParameters<typeof StdioServerTransport>[0],
    stdout as ConstructorParameters<typeof StdioServerTransport>[1],
  );
  return { transport, closed };
}

/** Starts `tasks` and serves it on stdio. */
export async function serveTaskServerStdio(
  tasks: TaskServer,
  options: StdioServeOptions = {},
): Promise<StdioTaskServer> {
  const info = options.serverInfo ?? { name: 'closeout', version: '0.1.0' };
  await tasks.start();
  const { transport: stdio, closed } = stdioServerTransport(options.stdin, options.stdout);
  // push on the one channel (stdioPush.ts); a stdio connection has no credentials: one principal for all its tasks
  const principal = (options.principal ?? defaultPrincipal)({ authInfo: undefined });
  const transport = new TaskListenTransport(stdio, tasks, principal, info);
  const handle = serveStdio(
    () => {
      const mcp = new McpServer(info);
      options.setup?.(mcp);
      attachTasks(mcp, tasks, options.principal ? { principal: options.principal } : {});
      return mcp;
    },
    { transport, ...(options.onerror && { onerror: options.onerror }) },
  );
  return {
    closed,
    close: async () => {
      await handle.close();
      await tasks.close();
    },
  };
}
