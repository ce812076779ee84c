/**
 * How database trouble leaves the task store and the ledger: one Error that names the component and the call that
 * failed, its message free of the password, marked `transient` when the same call may succeed again.
 */
import { scrubPasswords } from './connectionString.js';
import { isTransientPgError } from './transaction.js';

/** An Error made by `wrapPostgresError`. */
export type PostgresCallError = Error & { transient?: boolean; cause?: unknown };

/** Any thrown value as an Error. */
export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * `error` as `${component}: ${op} failed: ...`, the password scrubbed. The driver's error is kept as the cause for its
 * code only: its message and stack may quote what the driver was given. An error this function already made for the
 * same component passes through unchanged.
 */
export function wrapPostgresError(
  component: string,
  op: string,
  error: unknown,
  passwords: readonly string[],
): PostgresCallError {
  const cause = asError(error);
  if (cause.message.startsWith(`${component}: `)) return cause;
  const wrapped: PostgresCallError = new Error(
    `${component}: ${op} failed: ${scrubPasswords(cause.message, passwords)}`,
  );
  wrapped.cause = { code: (cause as { code?: unknown }).code };
  if (isTransientPgError(cause)) wrapped.transient = true;
  return wrapped;
}
