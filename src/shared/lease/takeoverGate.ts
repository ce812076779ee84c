/**
 * When a lease that ran out may be taken from its holder (docs/DESIGN.md, "Rules learned in the field", 3 and 11). A
 * lease runs out when its holder died, and also when nobody could renew anything: the store failed, froze, was locked
 * by another process, or answered late. Only the first may be taken over, and the taker can tell them apart only by
 * what it saw itself: the gate opens once the store has answered this process promptly and without a gap for a whole
 * lease. Through that lease every live holder that reaches the store renewed (it renews every third of a lease), so a
 * lease still run out belongs to a holder that failed to renew while the store was healthy.
 *
 * Fed by the calls of the lease loop (server) or the lease renewal (client), which go out at least every third of a
 * lease: a call that failed, a call that took longer than `lateMs`, and a pause longer than `gapMs` between two calls
 * (the process itself was stopped, or its event loop blocked) each close the gate for another whole lease. A process
 * that has just started knows nothing yet: its gate opens one healthy lease after its first answer. Holders proven
 * dead by the kernel (leaseHolder.ts) are taken over without the gate.
 */
export interface TakeoverGateOptions {
  /** The lease, ms: how long the store must have been healthy before a lapsed lease may be taken. */
  leaseMs: number;
  /** How often the calls that feed the gate go out, ms. Default a third of the lease. */
  everyMs?: number | undefined;
  /** Monotonic ms (performance.now, or a test's steady clock). */
  now?: (() => number) | undefined;
}

export class TakeoverGate {
  /** Since when (monotonic) every call answered promptly, with no gap; undefined until the next answer. */
  private healthySince: number | undefined;
  private lastAnsweredAt = -Infinity;
  readonly leaseMs: number;
  /** A call slower than this says the store stalled (a fifth of a lease). */
  readonly lateMs: number;
  /** No call for longer than this says this process stalled (the calls' period and a fifth of a lease). */
  readonly gapMs: number;
  private readonly now: () => number;

  constructor(options: TakeoverGateOptions) {
    this.leaseMs = options.leaseMs;
    this.lateMs = options.leaseMs / 5;
    this.gapMs = (options.everyMs ?? options.leaseMs / 3) + this.lateMs;
    this.now = options.now ?? (() => performance.now());
  }

  /** The time to pass as `sentAt` to `answered`. */
  clock(): number {
    return this.now();
  }

  /** A call that went out at `sentAt` (this gate's clock) reached the store and was answered just now. */
  answered(sentAt: number): void {
    const now = this.now();
    const late = now - sentAt > this.lateMs;
    const gap = sentAt - this.lastAnsweredAt > this.gapMs;
    if (this.healthySince === undefined || late || gap) this.healthySince = now;
    this.lastAnsweredAt = Math.max(this.lastAnsweredAt, now);
  }

  /** A call failed: the store may be unreachable, and nothing is known of the holders until it answers again. */
  failed(): void {
    this.healthySince = undefined;
  }

  /** Whether a lease that ran out may be taken from its holder now. */
  isOpen(): boolean {
    const now = this.now();
    return (
      this.healthySince !== undefined &&
      now - this.healthySince >= this.leaseMs &&
      now - this.lastAnsweredAt <= this.gapMs
    );
  }

  /** Ms until the gate may open if the store stays healthy (0 when open), for reports. */
  opensInMs(): number {
    if (this.isOpen()) return 0;
    const since = this.healthySince ?? this.now();
    return Math.max(0, since + this.leaseMs - this.now());
  }
}
