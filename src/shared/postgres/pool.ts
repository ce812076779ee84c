/**
 * How the task store and the ledger set up their node-postgres pools: one connection configuration (timeouts on both
 * ends, keepAlive), and the error listeners without which a dropped connection would crash the process.
 */
import type pg from 'pg';

export interface ConnectionOptions {
  /** How long making a connection may take before the call fails. Default 5000 ms. */
  connectionTimeoutMs?: number | undefined;
  /** How long one statement may take before it fails. Default 15000 ms. */
  statementTimeoutMs?: number | undefined;
}

/** How to connect: from a connection string, with the connection timeout and keepAlive. */
export function connectionConfig(connectionString: string, options: ConnectionOptions): pg.ClientConfig {
  return {
    connectionString,
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5000,
    // keepAlive notices a peer that vanished without closing the connection
    keepAlive: true,
  };
}

/**
 * The statement timeouts: the server gives up on a slow statement; the client gives up a little later on a server
 * that does not answer at all (a hung host, a dropped network): pg then discards that connection.
 */
export function statementTimeouts(
  options: ConnectionOptions,
): Pick<pg.PoolConfig, 'statement_timeout' | 'query_timeout'> {
  const statementTimeoutMs = options.statementTimeoutMs ?? 15_000;
  return { statement_timeout: statementTimeoutMs, query_timeout: statementTimeoutMs + 1000 };
}

/**
 * Keeps a pool's connection errors from crashing the process. An idle connection that drops is removed by the pool,
 * and told to `onIdleError` (unless left out: a pool handed in by the caller keeps the caller's listeners). Nor does a
 * pool listen to a connection it has handed out: one the database ends then (a restart, pg_terminate_backend) between
 * two statements would be an unhandled 'error' that kills the process; the next statement on it fails instead, and
 * the pool drops it.
 */
export function guardPool(pool: pg.Pool, onIdleError?: (error: Error) => void): void {
  if (onIdleError) pool.on('error', onIdleError);
  pool.on('connect', (client) => client.on('error', () => {}));
}
