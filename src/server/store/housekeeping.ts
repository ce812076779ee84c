/**
 * The numbers and words of a store's housekeeping (expiry, purge), the same for every store and for the TaskServer
 * that drives the sweeps: each written once here.
 */

/** The size of one step of a sweep that pages (expiry, purge): small enough never to block serving for long. */
export const SWEEP_PAGE = 500;

/** Purged ids are remembered this long, enough to outlive a client's last reasonable poll. */
export const TOMBSTONE_RETENTION_MS = 7 * 24 * 3600_000;

const expiredText = (ttl: string) => `Task expired: its TTL of ${ttl} ms elapsed before it finished`;

/** The status message and error text of a task the expiry sweep closed. */
export function expiredMessage(ttlMs: number): string {
  return expiredText(String(ttlMs));
}

/** `expiredMessage` as a PostgreSQL `format()` pattern: `%s` stands for the TTL (no quote in it to escape). */
export const EXPIRED_MESSAGE_FORMAT = expiredText('%s');
