/**
 * The client's self-fence (docs/DESIGN.md, "Rules learned in the field", 13): a process cut off from its ledger alone
 * (the database fine for the other workers) stops its input rounds before another worker may take their records and
 * ask the person again. On its steady clock it knows, for each record, the send time of the last write the ledger
 * confirmed that proved its lease: the renewal of all its leases, or the record's own claim or intent. A fifth of a
 * lease before that time plus a lease (`heldUntil`, src/shared/lease/leaseFence.ts), the rounds in progress on the
 * record are stopped, and no new one starts until a renewal lands again; from a third of a lease before it, renewals
 * are asked for every twentieth of a lease, so one goes out as soon as the ledger may answer.
 */
import { fenceTimes, heldUntil, renewalRetryMs } from '../../shared/lease/leaseFence.js';
import type { SchedulerClock } from '../core/scheduler.js';

export interface SelfFenceOptions {
  leaseMs: number;
  /** The process's steady clock: the times given to `renewed` and `proven` are on it. */
  clock: SchedulerClock;
  /** Stop the input rounds in progress on a record whose lease may soon be taken. */
  stop: (recordId: string) => void;
  /** Send a renewal now, unless one is in flight. */
  renew: () => void;
}

export class SelfFence {
  /** The send time of the last renewal of all this process's leases that the ledger confirmed. */
  private renewedAt = -Infinity;
  /**
   * Records whose own claim or intent the ledger confirmed after the last confirmed renewal went out: its send time and
   * when it was confirmed. That renewal may have run before the claim (it did not cover the record), and on a ledger
   * that keeps one expiry per holder (SQLite's holder row) the claim, stamped from its own send time, may have set
   * every lease of this process back to that time plus a lease. A renewal sent after the claim was confirmed covers it.
   */
  private readonly claims = new Map<string, { sentAt: number; confirmedAt: number }>();
  /** Records with input rounds in progress, and how many. */
  private readonly watched = new Map<string, number>();
  private timer: unknown;
  private timerAt = Infinity;

  constructor(private readonly options: SelfFenceOptions) {}

  /** A renewal sent at `sentAt` was confirmed: every lease this process still held then runs a lease from then. */
  renewed(sentAt: number): void {
    if (sentAt <= this.renewedAt) return;
    this.renewedAt = sentAt;
    // a claim confirmed before this renewal went out is covered by it; one confirmed later is not
    for (const [recordId, claim] of this.claims) if (claim.confirmedAt <= sentAt) this.claims.delete(recordId);
  }

  /** The record's claim or intent, sent at `sentAt`, was confirmed (now). */
  proven(recordId: string, sentAt: number): void {
    const known = this.claims.get(recordId);
    if (known === undefined || sentAt > known.sentAt) {
      this.claims.set(recordId, { sentAt, confirmedAt: this.options.clock.now() });
    }
  }

  /**
   * The earliest moment (steady clock) another worker could take the record's lease: a lease after the record's own
   * claim when no confirmed renewal has covered it yet, else after the last confirmed renewal; never later than a lease
   * after the oldest claim not yet covered, which may have set the holder's one expiry back.
   */
  heldUntil(recordId: string): number {
    let proven = this.claims.get(recordId)?.sentAt ?? this.renewedAt;
    for (const claim of this.claims.values()) proven = Math.min(proven, claim.sentAt);
    return heldUntil(proven, this.options.leaseMs);
  }

  /** Whether an input round may start, or go on, on the record now: its lease is proven past the fence's margin. */
  isHeld(recordId: string): boolean {
    return this.options.clock.now() < fenceTimes(this.heldUntil(recordId), this.options.leaseMs).stopAt;
  }

  /** An input round starts on the record: watched until the returned function is called. */
  watch(recordId: string): () => void {
    this.watched.set(recordId, (this.watched.get(recordId) ?? 0) + 1);
    this.check();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.watched.get(recordId) ?? 1) - 1;
      if (left > 0) this.watched.set(recordId, left);
      else this.watched.delete(recordId);
    };
  }

  /** No more checks (the TaskClient closes). */
  stop(): void {
    if (this.timer !== undefined) this.options.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }

  /**
   * Stops the rounds of records whose lease is proven for less than the fence's margin, asks for renewals from a
   * third of a lease before, and sets the one timer for the next moment either is due. Rounds are proven together by
   * each renewal, so this fires about once a renewal while rounds are open, and stops nothing while renewals land.
   */
  private check(): void {
    const { leaseMs, clock } = this.options;
    const now = clock.now();
    let renew = false;
    let next = Infinity;
    for (const recordId of this.watched.keys()) {
      const { stopAt, renewAt } = fenceTimes(this.heldUntil(recordId), leaseMs);
      if (now >= stopAt) {
        this.options.stop(recordId);
        continue;
      }
      if (now >= renewAt) renew = true;
      next = Math.min(next, now >= renewAt ? Math.min(stopAt, now + renewalRetryMs(leaseMs)) : renewAt);
    }
    if (renew) this.options.renew();
    if (next < this.timerAt || this.timer === undefined) this.arm(next);
  }

  private arm(at: number): void {
    const { clock } = this.options;
    if (this.timer !== undefined) clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = at;
    if (at === Infinity) return;
    this.timer = clock.setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        this.check();
      },
      Math.max(0, at - clock.now()),
    );
    // the fence alone must not keep a process alive: its rounds do
    (this.timer as { unref?: () => void }).unref?.();
  }
}
