/**
 * A server store opened by the operator's commands (`closeout tasks`, `closeout task show`): to read what `closeout
 * serve` (or any TaskServer) stored, never to create a store. A SQLite file that does not exist is refused rather than
 * created empty, so a mistyped --store never reads as a store without tasks.
 */
import { existsSync } from 'node:fs';

import type { Command } from 'commander';

import { PostgresTaskStore } from '../server/store/postgresTaskStore.js';
import { SqliteTaskStore } from '../server/store/sqliteTaskStore.js';
import type { TaskStore } from '../server/store/taskStore.js';
import { isPostgresUrl } from '../shared/postgres/connectionString.js';
import { CliError } from './cliError.js';
import { describeStoreLocation } from './storeLocation.js';

/** `closeout serve`'s default store, so the commands find it from the same folder without a flag. */
export const DEFAULT_STORE = './closeout-server.db';

export interface StoreFlags {
  store: string;
}

export function addStoreOption(command: Command): Command {
  return command.option(
    '--store <path|url>',
    'the server store: the SQLite file `closeout serve --store` names, or a postgres:// URL',
    DEFAULT_STORE,
  );
}

/** The store and how it is shown (a connection string without its password); the caller closes it. */
export async function openStoreToRead(location: string): Promise<{ store: TaskStore; shown: string }> {
  const shown = describeStoreLocation(location);
  if (isPostgresUrl(location)) {
    // a few connections are enough for one command's reads
    return { store: await PostgresTaskStore.open(location, { maxConnections: 2 }), shown };
  }
  if (!existsSync(location)) {
    throw new CliError(
      `no store at ${shown}: pass --store with the file \`closeout serve --store\` uses, or a postgres:// URL`,
    );
  }
  return { store: new SqliteTaskStore(location, { backgroundCheckpoints: false }), shown };
}
