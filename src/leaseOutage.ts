/**
 * What a lease that ran out says about its holder once the storage that keeps the leases has failed (docs/DESIGN.md,
 * "Rules learned in the field", 3): nothing, when it ran out while nobody could renew. The server's lease loop and a
 * client fleet's take-over feed their own calls to the storage in here; after some failed, for one lease from the
 * storage's first answer, only leases that ran out before its last answer before the failure may be taken over, and
 * the live holders renew theirs meanwhile (every renewal tick retries).
 */
export class LeaseOutage {
  /** When (the storage's clock) a call last reached the storage. */
  private answeredAt = -Infinity;
  /** While calls fail: when the storage last answered before that. */
  private failingSince: number | undefined;
  /** After a failure: until when only leases that ran out before `expiredBefore` may be taken. */
  private hold: { expiredBefore: number; until: number } | undefined;

  constructor(private readonly leaseMs: number) {}

  /** A call that went out at `at` reached the storage. */
  answered(at: number): void {
    if (this.failingSince !== undefined) {
      this.hold = { expiredBefore: this.failingSince, until: at + this.leaseMs };
      this.failingSince = undefined;
    }
    this.answeredAt = at;
  }

  /** A call failed: the storage may be unreachable. */
  failed(): void {
    this.failingSince ??= this.answeredAt;
  }

  /** The lease expiry before which a lease counts as lapsed at `now`, for a take-over. */
  expiredBefore(now: number): number {
    const limit = this.failingSince ?? (this.hold && now < this.hold.until ? this.hold.expiredBefore : undefined);
    return limit === undefined ? now : Math.min(now, limit);
  }
}
