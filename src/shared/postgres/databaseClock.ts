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
