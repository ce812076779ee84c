/**
 * Which ledger a command uses (`--ledger PATH`, else `CLOSEOUT_LEDGER`, else `~/.closeout/ledger.db`) and opening it
 * with a one-line explanation when it cannot be used. The ledger holds every handle the CLI has seen
 * (docs/REQUIREMENTS.md S4, S6). A `postgres://` connection string instead of a path names a PostgresLedger, the one a
 * fleet of workers shares; it is shown only without its password (`displayLedgerLocation`).
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

import { TaskClientError } from '../client/errors.js';
import type { Ledger } from '../client/ledger/index.js';
import { SqliteLedger } from '../client/ledger/index.js';
import { displayLedgerLocation, isPostgresLocation } from '../client/ledger/ledgerLocation.js';
import { CliError } from './cliError.js';
import { dataFilePath, makeDataDirectory } from './dataDirectory.js';

export const LEDGER_ENV = 'CLOSEOUT_LEDGER';

/** How long a command waits for another process's write before it calls the ledger locked. */
const BUSY_TIMEOUT_MS = 3_000;

/** The flag, else the environment, else the default in the home directory. */
export function resolveLedgerPath(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const given = flag !== undefined && flag !== '' ? flag : env[LEDGER_ENV];
  if (given === undefined || given === '') return defaultLedgerPath();
  return isPostgresLocation(given) ? given : resolve(given);
}

export function defaultLedgerPath(): string {
  return dataFilePath('ledger.db');
}

/**
 * Open the ledger a location names: a PostgreSQL database (migrated on open), else a SQLite file (`openLedgerFile`).
 */
export async function openLedger(location: string, options: { mustExist?: boolean } = {}): Promise<Ledger | undefined> {
  if (!isPostgresLocation(location)) return openLedgerFile(location, options);
  // loaded only for a PostgreSQL ledger: commands on a ledger file start without the driver
  const { PostgresLedger } = await import('../client/ledger/postgresLedger.js');
  try {
    return await PostgresLedger.open(location, { connectionTimeoutMs: BUSY_TIMEOUT_MS });
  } catch (error) {
    // the ledger's own errors never carry the password; the location is shown without it
    const message = error instanceof Error ? error.message : String(error);
    throw new CliError(
      `cannot open the ledger ${displayLedgerLocation(location)} (${message}): check the database, or pass --ledger`,
    );
  }
}

/**
 * Open the ledger file. `mustExist` (reading commands) refuses to create one, so looking at an empty ledger leaves no
 * file behind; the default directory is created (owner-only) when a command needs to write.
 */
export function openLedgerFile(path: string, options: { mustExist?: boolean } = {}): SqliteLedger | undefined {
  if (statSync(path, { throwIfNoEntry: false })?.isDirectory()) {
    throw new CliError(
      `the ledger ${path} is a directory: pass --ledger with a file in it, e.g. ${join(path, 'ledger.db')}`,
    );
  }
  if (!existsSync(path)) {
    if (options.mustExist) return undefined;
    if (path === defaultLedgerPath()) makeDataDirectory(path);
    else if (!existsSync(dirname(path))) {
      throw new CliError(`cannot create the ledger ${path}: its directory does not exist; create it or pass --ledger`);
    }
  }
  try {
    return new SqliteLedger(path, { busyTimeoutMs: BUSY_TIMEOUT_MS });
  } catch (error) {
    throw ledgerError(path, error) ?? error;
  }
}

/** A CliError for what SQLite says about the ledger file, or undefined when the error is something else. */
export function ledgerError(path: string, failed: unknown): CliError | undefined {
  // the client's own classification (`ledger-busy`, `ledger-unavailable`) wraps what SQLite said, which is what this reads
  const error =
    failed instanceof TaskClientError && failed.code.startsWith('ledger-') && failed.cause !== undefined
      ? failed.cause
      : failed;
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  if (code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED') {
    return new CliError(
      `the ledger ${path} is locked by another process (${message}): wait for it to finish, or pass --ledger with another file`,
    );
  }
  if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT') {
    return new CliError(
      `the ledger ${path} is corrupt or not a Closeout ledger (${message}): move it aside, or pass --ledger with another file`,
    );
  }
  if (code === 'SQLITE_CANTOPEN' || code === 'SQLITE_READONLY' || code === 'SQLITE_PERM') {
    return new CliError(`cannot open the ledger ${path} (${message}): check its permissions, or pass --ledger`);
  }
  if (/schema version/.test(message)) {
    return new CliError(`${message}: upgrade closeout, or pass --ledger with another file`);
  }
  return undefined;
}
