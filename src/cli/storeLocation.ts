/** A server store's `--store` value (a SQLite path or a postgres:// URL) as the commands that open one show it. */
import { parse as parseConnectionString } from 'pg-connection-string';

import { isPostgresUrl } from '../shared/postgres/connectionString.js';

/**
 * The store's location as logged. A PostgreSQL connection string is parsed the way pg parses it (pg-connection-string)
 * and the line is rebuilt from its user, host, port and database only: a password can hide in the authority, in the
 * query, percent-encoded or behind any letter case of the scheme, and none of them is ever printed.
 */
export function describeStoreLocation(location: string): string {
  if (!isPostgresUrl(location)) return location;
  let config: ReturnType<typeof parseConnectionString>;
  try {
    config = parseConnectionString(location);
  } catch {
    return 'a postgres:// URL (unparsable)';
  }
  const user = config.user ? `${config.user}@` : '';
  const port = config.port ? `:${config.port}` : '';
  const host = config.host?.includes(':') ? `[${config.host}]` : (config.host ?? '');
  const secret = config.password ? ' (password hidden)' : '';
  return `postgres://${user}${host}${port}/${config.database ?? ''}${secret}`;
}
