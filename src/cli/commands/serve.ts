/**
 * `closeout serve`: the demo (or conformance) task tools over Streamable HTTP on a durable store.
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { InMemoryServerEventBus } from '@modelcontextprotocol/server';
import type { Command } from 'commander';
import { InvalidArgumentError, Option } from 'commander';

import { conformanceDiagnostics, registerConformanceTools } from '../../demo/conformanceTools.js';
import { registerDemoTools } from '../../demo/demoTools.js';
import {
  openTaskStore,
  serveTaskServer,
  serveTaskServerStdio,
  type TaskActivity,
  TaskServer,
  type TaskStore,
} from '../../server/index.js';
import { DEFAULT_LEASE_MS } from '../../server/taskServerOptions.js';
import { isPostgresUrl } from '../../shared/postgres/connectionString.js';
import { isTransientPgError } from '../../shared/postgres/transaction.js';
import { parseNonNegativeInt, parsePort, parsePositiveInt } from '../arguments.js';
import { CliError } from '../cliError.js';
import { dataFilePath, makeDataDirectory } from '../dataDirectory.js';
import { describeStoreLocation } from '../storeLocation.js';
import { chain } from '../terminal/explain.js';
import { describeServerError } from './doctorProbe.js';
import { type MetricsEndpoint, serveMetrics } from './metricsEndpoint.js';
import { activityLine, type LogFormat, startLine, stopLine } from './serveActivity.js';

interface ServeFlags {
  port: number;
  host: string;
  store: string;
  tools: 'demo' | 'conformance';
  /** Absent when no --token was given: commander would print an empty default `{}` in --help. */
  token?: Record<string, string>;
  leaseMs: number;
  storeWaitMs: number;
  retentionMs: number;
  unlimitedRetentionMs: number;
  sqliteSynchronous?: 'full' | 'normal';
  metricsPort?: number;
  metricsHost: string;
  serviceName: string;
  stdio?: boolean;
  logFormat: LogFormat;
  quiet?: boolean;
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description(
      'Serve task tools over Streamable HTTP at http://HOST:PORT/mcp (or over stdio, for a host), every task in a durable store',
    )
    .option(
      '--stdio',
      'serve on stdin and stdout, for a host that starts the server (the store defaults to ~/.closeout/server.db)',
    )
    .option('--port <port>', 'TCP port (0 picks a free one)', parsePort, 3000)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--store <path|url>', 'SQLite file, or a postgres:// URL', './closeout-server.db')
    .option('--tools <set>', 'which tools to serve: demo or conformance', parseToolSet, 'demo')
    .option(
      '--token <token=principal>',
      'require this bearer token and bind its tasks to the principal (repeatable)',
      collectToken,
    )
    .option('--lease-ms <ms>', 'how long a task lease holds without renewal', parsePositiveInt, DEFAULT_LEASE_MS)
    .option(
      '--store-wait-ms <ms>',
      'how long to wait at start for a PostgreSQL store that cannot be reached (0: fail at once)',
      parseNonNegativeInt,
      60_000,
    )
    .option(
      '--retention-ms <ms>',
      'how long a finished task is kept past createdAt + ttlMs before it is purged',
      parsePositiveInt,
      3_600_000,
    )
    .option(
      '--unlimited-retention-ms <ms>',
      'how long a finished task with no TTL (ttlMs null) is kept after it finished',
      parsePositiveInt,
      7 * 24 * 3_600_000,
    )
    .addOption(
      new Option(
        '--sqlite-synchronous <level>',
        'full (default): every commit on disk before it is acknowledged; normal: faster, but the last tasks ' +
          'acknowledged before a power cut may be lost',
      )
        .choices(['full', 'normal'])
        .env('CLOSEOUT_SQLITE_SYNCHRONOUS'),
    )
    .option(
      '--metrics-port <port>',
      'serve metrics in the Prometheus text format at GET /metrics (0: a free port)',
      parsePort,
    )
    .option('--metrics-host <host>', 'interface the metrics listen on', '127.0.0.1')
    .option('--service-name <name>', 'service.name of the metrics (target_info), to tell instances apart', 'closeout')
    .addOption(
      new Option('--log-format <format>', 'the task activity log on stderr: text, or json (one object per line)')
        .choices(['text', 'json'])
        .default('text'),
    )
    .option('--quiet', 'no task activity log (errors and the start line still go to stderr)')
    .action(async (flags: ServeFlags, command: Command) => {
      // a host starts a stdio server in whatever working directory it likes: its store lives in the user's own
      if (flags.stdio && command.getOptionValueSource('store') === 'default') {
        flags.store = dataFilePath('server.db');
        makeDataDirectory(flags.store);
      }
      if (flags.sqliteSynchronous !== undefined && isPostgresUrl(flags.store)) {
        throw new CliError('--sqlite-synchronous applies to a SQLite store only, not to a postgres:// URL');
      }
      assertStoreFolder(flags.store);
      const metricsEndpoint: MetricsEndpoint | undefined =
        flags.metricsPort === undefined
          ? undefined
          : await serveMetrics(flags.metricsPort, flags.metricsHost, flags.serviceName);
      const store = await openWhenReachable(flags.store, flags.sqliteSynchronous, flags.storeWaitMs);
      const tasks = new TaskServer({
        store,
        ...(metricsEndpoint && { telemetry: { meterProvider: metricsEndpoint.meterProvider } }),
        leaseMs: flags.leaseMs,
        retentionMs: flags.retentionMs,
        unlimitedRetentionMs: flags.unlimitedRetentionMs,
        ...(!flags.quiet && {
          onActivity: (activity: TaskActivity) => console.error(activityLine(activity, flags.logFormat)),
        }),
      });
      const onerror = (error: Error) => console.error(`[closeout serve] ${describeServerError(error.message)}`);
      // the conformance set also serves the plain diagnostic tools of the suite's server-stateless scenario, on the SDK
      // server itself; one of them announces tool-list changes on the subscriptions/listen bus
      const bus = new InMemoryServerEventBus(onerror);
      if (flags.tools === 'conformance') registerConformanceTools(tasks);
      else registerDemoTools(tasks);
      /** Stops on SIGINT or SIGTERM (or when called): the server first, then the store and the metrics endpoint. */
      const stopOn = (server: { close(): Promise<void> }) => {
        const stop = async () => {
          // running tasks are handed back: the next start of this server (or another instance) takes them up
          const running = tasks.runningCount();
          await server.close();
          if (!flags.quiet) console.error(stopLine(running, flags.logFormat));
          await store.close();
          await metricsEndpoint?.close();
          process.exit(0);
        };
        process.once('SIGINT', () => void stop());
        process.once('SIGTERM', () => void stop());
        return stop;
      };
      if (flags.stdio) {
        // stdout carries JSON-RPC only: everything said goes to stderr
        const stdio = await serveTaskServerStdio(tasks, {
          serverInfo: { name: 'closeout', version: '0.1.0' },
          ...(flags.tools === 'conformance' && { setup: conformanceDiagnostics(bus) }),
          onerror,
        });
        console.error(
          `closeout serve: ${flags.tools} tools on stdio, store ${describeStoreLocation(flags.store)}, instance ${tasks.instanceId}`,
        );
        await logOpenTasks(store, flags);
        // the host closing the pipe stops it too
        void stdio.closed.then(stopOn(stdio));
        return;
      }
      let serving;
      try {
        serving = await serveTaskServer(tasks, {
          port: flags.port,
          host: flags.host,
          serverInfo: { name: 'closeout', version: '0.1.0' },
          ...(flags.token && { tokens: flags.token }),
          ...(flags.tools === 'conformance' && { bus, setup: conformanceDiagnostics(bus) }),
          onerror,
        });
      } catch (error) {
        await store.close();
        await metricsEndpoint?.close();
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'EADDRINUSE')
          throw new CliError(`port ${flags.port} is in use: pass --port with a free port (or 0)`);
        throw error;
      }
      process.stdout.write(`${serving.url}\n`);
      if (metricsEndpoint) console.error(`closeout serve: metrics at ${metricsEndpoint.url}`);
      console.error(
        `closeout serve: ${flags.tools} tools, store ${describeStoreLocation(flags.store)}, instance ${tasks.instanceId}`,
      );
      await logOpenTasks(store, flags);
      stopOn(serving);
    });
}

/** The start summary: how many open tasks the store holds (nothing when quiet, or when the store cannot count). */
async function logOpenTasks(store: TaskStore, flags: ServeFlags): Promise<void> {
  if (flags.quiet || !store.countTasks) return;
  try {
    const counts = await store.countTasks({ status: ['working', 'input_required'] });
    console.error(startLine(counts.working + counts.input_required, flags.logFormat));
  } catch (error) {
    console.error(`closeout serve: the open tasks could not be counted: ${(error as Error).message}`);
  }
}

/**
 * Opens the store; a PostgreSQL store that cannot be reached yet (stopped, restarting, not accepting connections) is
 * tried again, with a doubling pause, for at most `waitMs`: an instance its supervisor restarts while the database is
 * down comes up with the database instead of exiting (docs/DESIGN.md, "Rules learned in the field", 3). Anything else
 * (a wrong password, a missing database) fails at once.
 */
async function openWhenReachable(
  location: string,
  synchronous: 'full' | 'normal' | undefined,
  waitMs: number,
): Promise<TaskStore> {
  const deadline = Date.now() + waitMs;
  let pauseMs = 250;
  let told = false;
  for (;;) {
    try {
      return await openTaskStore(location, { synchronous });
    } catch (error) {
      if (!chain(error).some(isTransientPgError) || Date.now() + pauseMs > deadline) throw error;
      if (!told) {
        console.error(
          `closeout serve: waiting for the store (at most ${waitMs} ms, --store-wait-ms): ${(error as Error).message}`,
        );
        told = true;
      }
      await sleep(pauseMs);
      pauseMs = Math.min(5000, pauseMs * 2);
    }
  }
}

/** A SQLite store is created in a folder that must exist: say which one is missing, in one line. */
function assertStoreFolder(location: string): void {
  if (isPostgresUrl(location)) return;
  const folder = dirname(resolve(location));
  if (!existsSync(folder)) {
    throw new CliError(
      `cannot create the store ${location}: the folder ${folder} does not exist; create it, or pass --store with a path in an existing folder`,
    );
  }
}

function parseToolSet(value: string): 'demo' | 'conformance' {
  if (value === 'demo' || value === 'conformance') return value;
  throw new InvalidArgumentError('expected demo or conformance');
}

function collectToken(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = value.indexOf('=');
  if (at <= 0 || at === value.length - 1) throw new InvalidArgumentError('expected TOKEN=PRINCIPAL');
  return { ...previous, [value.slice(0, at)]: value.slice(at + 1) };
}
