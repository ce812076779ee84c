import { PostgresTaskStore } from './postgresTaskStore.js';
import { SqliteTaskStore } from './sqliteTaskStore.js';
import type { TaskStore } from './taskStore.js';

/** Opens the store a `--store` value names: a `postgres://` URL (migrated on open), else a SQLite file path. */
export async function openTaskStore(location: string): Promise<TaskStore> {
  if (/^postgres(ql)?:\/\//i.test(location)) return PostgresTaskStore.open(location);
  return new SqliteTaskStore(location);
}
