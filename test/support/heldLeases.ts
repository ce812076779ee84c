/**
 * A SQLite task store on which one instance already holds `held` open leases (tasks `task-0` … `task-{held-1}`, fence
 * 1), seeded with one bulk insert: for the renewal tests, which measure a renewal's own work, not the creates.
 */
import { join } from 'node:path';

import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';

export async function sqliteStoreHolding(dir: string, held: number, holder: string): Promise<SqliteTaskStore> {
  const path = join(dir, `held-${held}.db`);
  await new SqliteTaskStore(path).close();
  const now = Date.now();
  const seed = openDatabase(path);
  seed
    .prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
       INSERT INTO tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, poll_interval_ms,
                          resumable, lease_owner, lease_expires_at, fence, attempt)
       SELECT 'task-' || i, 'caller-' || (i % 64), 'hold', '{}', 'working', ?, ?, 1000, 0, ?, ?, 1, 1 FROM n`,
    )
    .run(held, now, now, holder, now + 10_000);
  seed.close();
  // commits not synced: the fsync of a loaded disk is not what these tests measure, the statement's own work is
  return new SqliteTaskStore(path, { synchronous: 'normal' });
}
