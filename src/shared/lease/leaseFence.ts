/**
 * The self-fence's arithmetic, one copy for both halves (docs/DESIGN.md, "Rules learned in the field", 13): a holder
 * that cannot renew stops its runs (the server's handlers, the client's input rounds) before anyone may take them.
 * All times are on the holder's own monotonic clock.
 */

/** A run is stopped this share of a lease before its lease could at the earliest be taken (rule 13 says why). */
export const STOP_SHARE = 1 / 5;
/** From this share of a lease before then on, renewals are asked for every `renewalRetryMs`. */
export const RENEW_SHARE = 1 / 3;

/**
 * The earliest moment another holder could take the lease: the send time of the last write that proved it (a create,
 * a claim, a renewal the store confirmed), plus a lease. No taker can start sooner: the store's expiry is at least that
 * send time plus a lease, and a taker claims only an expiry already past when its claim goes out.
 */
export function heldUntil(provenSentAt: number, leaseMs: number): number {
  return provenSentAt + leaseMs;
}

/** When a run on a lease held until `until` is stopped (`stopAt`), and from when renewals are asked for (`renewAt`). */
export function fenceTimes(until: number, leaseMs: number): { stopAt: number; renewAt: number } {
  return { stopAt: until - leaseMs * STOP_SHARE, renewAt: until - leaseMs * RENEW_SHARE };
}

/** How often a renewal is asked for again while a lease is short (a twentieth of a lease, within 10 to 100 ms). */
export function renewalRetryMs(leaseMs: number): number {
  return Math.max(10, Math.min(100, leaseMs / 20));
}
