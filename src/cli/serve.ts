/**
 * `closeout serve`: the demo (or conformance) task tools over Streamable HTTP on a durable store.
 */
import { InMemoryServerEventBus } from '@modelcontextprotocol/server';
import type { Command } from 'commander';
import { InvalidArgumentError, Option } from 'commander';

import { conformanceDiagnostics, registerConformanceTools } from '../demo/conformanceTools.js';
import { registerDemoTools } from '../demo/demoTools.js';
import { serveTaskServer } from '../server/http.js';
import { openTaskStore } from '../server/store/openTaskStore.js';
import { TaskServer } from '../server/taskServer.js';
import { parsePort, parsePositiveInt } from './arguments.js';
import { CliError } from './cliError.js';

interface ServeFlags {
  port: number;
  host: string;
  store: string;
  tools: 'demo' | 'conformance';
  token: Record<string, string>;
  leaseMs: number;
  sqliteSynchronous?: 'full' | 'normal';
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('Serve task tools over Streamable HTTP at http://HOST:PORT/mcp, every task in a durable store')
    .option('--port <port>', 'TCP port (0 picks a free one)', parsePort, 3000)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--store <path|url>', 'SQLite file, or a postgres:// URL', './closeout-server.db')
    .option('--tools <set>', 'which tools to serve: demo or conformance', parseToolSet, 'demo')
    .option(
      '--token <token=principal>',
      'require this bearer token and bind its tasks to the principal (repeatable)',
      collectToken,
      {},
    )
    .option('--lease-ms <ms>', 'how long a task lease holds without renewal', parsePositiveInt, 10_000)
    .addOption(
      new Option(
        '--sqlite-synchronous <level>',
        'full (default): every commit on disk before it is acknowledged; normal: faster, but the last tasks ' +
          'acknowledged before a power cut may be lost',
      )
        .choices(['full', 'normal'])
        .env('CLOSEOUT_SQLITE_SYNCHRONOUS'),
    )
    .action(async (flags: ServeFlags) => {
      if (flags.sqliteSynchronous !== undefined && /^postgres(ql)?:\/\//i.test(flags.store)) {
        throw new CliError('--sqlite-synchronous applies to a SQLite store only, not to a postgres:// URL');
      }
      const store = await openTaskStore(flags.store, { synchronous: flags.sqliteSynchronous });
      const tasks = new TaskServer({ store, leaseMs: flags.leaseMs });
      const onerror = (error: Error) => console.error(`[closeout serve] ${error.message}`);
      // the conformance set also serves the plain diagnostic tools of the suite's server-stateless scenario, on the SDK
      // server itself; one of them announces tool-list changes on the subscriptions/listen bus
      const bus = new InMemoryServerEventBus(onerror);
      if (flags.tools === 'conformance') registerConformanceTools(tasks);
      else registerDemoTools(tasks);
      let serving;
      try {
        serving = await serveTaskServer(tasks, {
          port: flags.port,
          host: flags.host,
          serverInfo: { name: 'closeout', version: '0.1.0' },
          ...(Object.keys(flags.token).length > 0 && { tokens: flags.token }),
          ...(flags.tools === 'conformance' && { bus, setup: conformanceDiagnostics(bus) }),
          onerror,
        });
      } catch (error) {
        await store.close();
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'EADDRINUSE')
          throw new CliError(`port ${flags.port} is in use: pass --port with a free port (or 0)`);
        throw error;
      }
      process.stdout.write(`${serving.url}\n`);
      console.error(
        `closeout serve: ${flags.tools} tools, store ${withoutPassword(flags.store)}, instance ${tasks.instanceId}`,
      );
      const stop = async () => {
        await serving.close();
        await store.close();
        process.exit(0);
      };
      process.once('SIGINT', () => void stop());
      process.once('SIGTERM', () => void stop());
    });
}

/** The store's location as logged: a postgres:// URL keeps its user and host but never its password. */
function withoutPassword(location: string): string {
  if (!/^postgres(ql)?:\/\//.test(location)) return location;
  try {
    const url = new URL(location);
    if (url.password) url.password = '***';
    return url.href;
  } catch {
    return 'a postgres:// URL';
  }
}

function parseToolSet(value: string): 'demo' | 'conformance' {
  if (value === 'demo' || value === 'conformance') return value;
  throw new InvalidArgumentError('expected demo or conformance');
}

function collectToken(value: string, previous: Record<string, string>): Record<string, string> {
  const at = value.indexOf('=');
  if (at <= 0 || at === value.length - 1) throw new InvalidArgumentError('expected TOKEN=PRINCIPAL');
  return { ...previous, [value.slice(0, at)]: value.slice(at + 1) };
}
