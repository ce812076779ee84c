/**
 * The one migration runner of the task store and the ledger: a versioned list of statements, applied in one
 * transaction under an advisory lock (so processes starting together migrate once), refusing a database that a newer
 * build migrated (this build does not know what that schema means: it never writes to it).
 */
import type pg from 'pg';

/** The statements a schema's migrations run on, in that schema's tables. */
export interface MigrationStatements {
  /** Takes the transaction-scoped advisory lock that serialises migrations. */
  lock: string;
  createVersionTable: string;
  /** Answers `version`: the highest applied, 0 for a fresh database. */
  schemaVersion: string;
  /** Records version `$1` as applied. */
  recordVersion: string;
}

/**
 * Brings the schema to `migrations.length` on `client`, inside the caller's transaction. Entry i takes the database
 * from version i to i + 1. Throws when the database is at a newer version than this build knows (`what` names the
 * schema in that message).
 */
export async function runMigrations(
  client: pg.PoolClient,
  statements: MigrationStatements,
  migrations: readonly string[],
  what: string,
): Promise<void> {
  await client.query(statements.lock);
  await client.query(statements.createVersionTable);
  const { rows } = await client.query<{ version: number }>(statements.schemaVersion);
  const version = rows[0]?.version ?? 0;
  if (version > migrations.length) {
    throw new Error(
      `${what} schema version ${version} is newer than this build (${migrations.length}): upgrade closeout`,
    );
  }
  for (let v = version; v < migrations.length; v++) {
    await client.query(migrations[v]!);
    await client.query(statements.recordVersion, [v + 1]);
  }
}
