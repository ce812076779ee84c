/**
 * One transaction on one pooled PostgreSQL connection, for the server's task store and the client's ledger alike:
 * all of `fn` commits, or none of it.
 */
import type pg from 'pg';

export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  // the pool stops listening to a client it hands out: a connection cut mid-transaction would then be an unhandled
  // 'error' event that kills the process; the statement in flight rejects on its own
  const onError = () => (broken = true);
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    // a connection that cannot even roll back is not given back to the pool
    await client.query('ROLLBACK').catch(() => (broken = true));
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/** Error codes after which the same write may succeed when tried again (connection trouble, deadlock, overload). */
export function isTransientPgError(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && /^(08|53|57P|40P01|40001|ECONN|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN)/.test(code)) {
    return true;
  }
  const message = error instanceof Error ? error.message : String(error);
  return /Connection terminated|timeout|connect ECONNREFUSED|Client has encountered a connection error/i.test(message);
}
