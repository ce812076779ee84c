/**
 * `closeout console`: the web console (docs/cli.md, "The console") over a client ledger, a server store, or both, on
 * 127.0.0.1 by default. Bound to any other interface it requires a token, and prints the link that carries it. The
 * console acts on ledger records through this process's own TaskClients, with CLOSEOUT_TOKEN given to the servers it
 * belongs to, as every command does (src/cli/session.ts); leases it takes are handed back when it stops.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { isIP } from 'node:net';

import type { Command } from 'commander';

import { displayLedgerLocation, isPostgresLocation } from '../../client/ledger/ledgerLocation.js';
import type { ConsoleHandler } from '../../console/index.js';
import { createConsoleHandler } from '../../console/index.js';
import type { TaskStore } from '../../server/store/taskStore.js';
import { parsePort } from '../arguments.js';
import { CliError } from '../cliError.js';
import { LEDGER_ENV, resolveLedgerPath } from '../ledgerFile.js';
import { ClientSession } from '../session.js';
import { DEFAULT_STORE, openStoreToRead } from '../storeOpen.js';

/** The console's port unless --port says otherwise. */
export const DEFAULT_CONSOLE_PORT = 3900;

interface ConsoleFlags {
  ledger?: string;
  store?: string;
  port: number;
  host: string;
  token?: string;
  traceLink?: string;
}

export function registerConsole(program: Command): void {
  program
    .command('console')
    .description(
      'Serve a web console over a client ledger, a server store, or both: list, detail, answer, cancel, live',
    )
    .option(
      '--ledger <path|url>',
      `the client ledger (default: $${LEDGER_ENV}, else ~/.closeout/ledger.db, when it exists)`,
    )
    .option(
      '--store <path|url>',
      `the server store: the SQLite file \`closeout serve --store\` names, or a postgres:// URL (default: ${DEFAULT_STORE}, when it exists)`,
    )
    .option('--port <port>', 'TCP port (0 picks a free one)', parsePort, DEFAULT_CONSOLE_PORT)
    .option('--host <host>', 'interface to listen on (any but loopback requires a token, printed)', '127.0.0.1')
    .option('--token <token>', 'the token the console requires (default off loopback: a random one)')
    .option(
      '--trace-link <template>',
      'a link to a trace viewer, {traceId} replaced, e.g. http://127.0.0.1:16686/trace/{traceId}',
    )
    .action(runConsole);
}

/**
 * The token the console bound to `host` requires: the one given (at least 16 characters), else none on a loopback
 * interface (127.0.0.0/8, ::1, localhost) and a random one on any other (0.0.0.0, ::, a LAN address, a name).
 */
export function consoleToken(host: string, given: string | undefined): string | undefined {
  if (given !== undefined && given.length < 16) {
    throw new CliError('--token must be at least 16 characters: it is all that guards the console');
  }
  const loopback = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/i.test(host);
  return given ?? (loopback ? undefined : randomBytes(24).toString('base64url'));
}

async function runConsole(flags: ConsoleFlags): Promise<void> {
  const token = consoleToken(flags.host, flags.token);
  const chosen = flags.ledger !== undefined || flags.store !== undefined;
  const ledgerLocation = flags.ledger !== undefined || !chosen ? resolveLedgerPath(flags.ledger) : undefined;
  const storeLocation = flags.store ?? (chosen ? undefined : DEFAULT_STORE);

  let web: ConsoleHandler | undefined;
  let session: ClientSession | undefined;
  let store: TaskStore | undefined;
  let storeShown: string | undefined;
  const close = async () => {
    await web?.close();
    await session?.close();
    await store?.close();
  };
  try {
    if (ledgerLocation !== undefined) {
      session = await ClientSession.openExisting({
        ledgerPath: ledgerLocation,
        inputHandlers: () => web?.inputHandlers ?? {},
      });
      if (!session && flags.ledger !== undefined) {
        throw new CliError(`no ledger at ${displayLedgerLocation(ledgerLocation)}: \`closeout call\` creates it`);
      }
    }
    if (
      storeLocation !== undefined &&
      (flags.store !== undefined || isPostgresLocation(storeLocation) || existsSync(storeLocation))
    ) {
      ({ store, shown: storeShown } = await openStoreToRead(storeLocation));
    }
    if (!session && !store) {
      throw new CliError(
        `nothing to show: no ledger at ${displayLedgerLocation(ledgerLocation ?? resolveLedgerPath(undefined))} and no store at ${DEFAULT_STORE}; pass --ledger or --store`,
      );
    }
    const opened = session;
    web = createConsoleHandler({
      ledger: opened?.ledger,
      ledgerShown: ledgerLocation && displayLedgerLocation(ledgerLocation),
      connect: opened && ((endpoint) => opened.client(endpoint)),
      store,
      storeShown,
      auth: token === undefined ? undefined : { token },
      traceLink: flags.traceLink,
    });
  } catch (error) {
    await close();
    throw error;
  }
  const handler = web;
  const server = createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      reject(
        error.code === 'EADDRINUSE'
          ? new CliError(`port ${flags.port} is in use: pass --port with a free port (or 0)`)
          : error,
      );
    });
    server.listen(flags.port, flags.host, () => resolve());
  }).catch(async (error: unknown) => {
    await close();
    throw error;
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : flags.port;
  const host = isIP(flags.host) === 6 ? `[${flags.host}]` : flags.host;
  const url = `http://${host}:${port}/`;
  // the first line is the link to open (with the token when one is required), as `serve` prints its URL
  process.stdout.write(`${token === undefined ? url : `${url}?token=${token}`}\n`);
  const shows = [session && `ledger ${displayLedgerLocation(ledgerLocation!)}`, store && `store ${storeShown}`].filter(
    Boolean,
  );
  process.stderr.write(`closeout console: ${shows.join(' and ')}${token ? ' (the link carries the token)' : ''}\n`);
  const stop = async () => {
    server.closeAllConnections();
    server.close();
    await close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}
