/**
 * What a ledger location string names: a `postgres://` connection string is a PostgresLedger shared by a fleet,
 * anything else a SQLite ledger file. Kept apart from the ledgers so that telling them apart loads neither. The rules
 * themselves (what a PostgreSQL URL is, how its password is hidden) are shared with the server:
 * src/shared/postgres/connectionString.ts.
 */
import { isPostgresUrl, redactConnectionString } from '../../shared/postgres/connectionString.js';

export { redactConnectionString };

/** Whether a ledger location names a PostgreSQL database rather than a SQLite file. */
export function isPostgresLocation(location: string): boolean {
  return isPostgresUrl(location);
}

/** A ledger location as it may be shown: a file path as it is, a connection string without its password. */
export function displayLedgerLocation(location: string): string {
  return isPostgresUrl(location) ? redactConnectionString(location) : location;
}
