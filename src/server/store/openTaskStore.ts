import { SqliteTaskStore } from './sqliteTaskStore.js';
import type { TaskStore } from './taskStore.js';

/** Opens the store a `--store` value names: a `postgres://` URL, else a SQLite file path. */
export async function openTaskStore(location: string): Promise<TaskStore> {
  if (/^postgres(ql)?:\/\//i.test(location)) {
    throw new Error('PostgreSQL stores are not available in this build yet: pass a SQLite file path to --store');
  }
  return new SqliteTaskStore(location);
}
