import { isPostgresUrl } from '../../shared/postgres/connectionString.js';
import { PostgresTaskStore } from './postgresTaskStore.js';
import { SqliteTaskStore, type SqliteTaskStoreOptions } from './sqliteTaskStore.js';
import type { TaskStore } from './taskStore.js';

/**
 * Opens the store a `--store` value names: a `postgres://` URL (migrated on open), else a SQLite file path opened
 * with `sqlite` (refused for a PostgreSQL URL, where it would mean nothing).
 */
export async function openTaskStore(
  location: string,
  sqlite: Pick<SqliteTaskStoreOptions, 'synchronous'> = {},
): Promise<TaskStore> {
  if (isPostgresUrl(location)) {
    if (sqlite.synchronous !== undefined) {
      throw new RangeError(
        'synchronous applies to a SQLite store only; PostgreSQL commits as its server is configured',
      );
    }
    return PostgresTaskStore.open(location);
  }
  return new SqliteTaskStore(location, sqlite);
}
