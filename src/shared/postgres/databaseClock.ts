/**
 * The database's clock as a process keeps it: one read, then `now()` runs on from it by this process's monotonic clock,
 * so neither this host's wall clock nor a step of it moves the times the task store and the ledger stamp and compare
 * (docs/DESIGN.md, "Rules learned in the field", 2). Off by at most half the round trip of the read it was taken from,
 * and by the monotonic clock's drift since (read again every minute).
 */

/** How often the database's clock is read again. */
export const CLOCK_SYNC_MS = 60_000;

/** The statement that reads the database's clock, in milliseconds since the epoch. */
export const DATABASE_CLOCK_SQL = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`;

/**
 * A renewed lease's expiry as the renewal's UPDATE writes it: `lengthParameter` milliseconds from when the database
 * computes the row's new values, and never earlier than `untilParameter`, the expiry the holder computed when it sent
 * the renewal. The statement must lock its rows before it computes them (a MATERIALIZED CTE `... FOR UPDATE` the
 * UPDATE joins): an UPDATE that waits for a row lock itself keeps the values it computed before the wait unless the
 * row changed meanwhile. So a renewal held up behind another transaction's lock for longer than a lease lands with a
 * whole lease ahead, not already lapsed, and a taker that skips locked rows finds nothing to take the moment the lock
 * is gone (RELIABILITY.md, "Stalled stores"). A null length writes `untilParameter` as it is (a lease handed back).
 */
export function renewedLeaseExpirySql(untilParameter: string, lengthParameter: string): string {
  return `GREATEST(${untilParameter}::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + ${lengthParameter}::bigint)`;
}

/**
 * The length a renewal's expiry stands for, to pass beside it: `until` measured from `now` (the caller's database
 * clock), null when `until` is not ahead of it (a lease handed back with an expiry in the past keeps that expiry).
 */
export function renewedLeaseLength(until: number, now: number): number | null {
  return until > now ? until - now : null;
}

export class DatabaseClock {
  private sample: { databaseMs: number; atMonotonic: number; roundTripMs: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /** `read` answers the database's time in milliseconds (DATABASE_CLOCK_SQL), failing as the database fails. */
  constructor(private readonly read: () => Promise<number>) {}

  /** The database's time. Before the first `sync`, the host's clock. */
  now(): number {
    const sample = this.sample;
    return sample ? Math.floor(sample.databaseMs + (performance.now() - sample.atMonotonic)) : Date.now();
  }

  /**
   * Reads the database's clock, and from then on every minute (monotonic clocks drift a little). A slower read than
   * the one in use is kept only when the one in use is old: its error is half its round trip.
   */
  async sync(): Promise<void> {
    const sent = performance.now();
    const databaseMs = await this.read();
    const received = performance.now();
    const roundTripMs = received - sent;
    const current = this.sample;
    if (!current || roundTripMs <= current.roundTripMs * 2 || received - current.atMonotonic > 10 * CLOCK_SYNC_MS) {
      this.sample = { databaseMs, atMonotonic: sent + roundTripMs / 2, roundTripMs };
    }
    if (!this.timer && !this.stopped) {
      this.timer = setInterval(() => {
        // a failed read keeps the sample in use; the other calls report an unreachable database
        this.sync().catch(() => {});
      }, CLOCK_SYNC_MS);
      this.timer.unref();
    }
  }

  /** No more reads; `now()` keeps running on from the last one. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }
}
