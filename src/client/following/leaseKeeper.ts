/**
 * This process's leases on the ledger's records (docs/DESIGN.md, "Rules learned in the field", 1, 11 and 13): renewing
 * the ones it holds every third of a lease, taking up records nobody follows any more (resumeAll, one record's claim, a
 * fleet's take-over timer), the takeover gate through which alone a lapsed lease is taken, and the self-fence that
 * stops this process's input rounds when its own renewals stop landing. What it takes up it hands to `follow`
 * (Following.startFollowing), which polls it from then on.
 */
import { isDeadLocalHolder } from '../../shared/lease/leaseHolder.js';
import { TakeoverGate } from '../../shared/lease/takeoverGate.js';
import type { ClientCore } from '../core/clientCore.js';
import type { ResumeReport } from '../core/clientOptions.js';
import type { TaskRecord } from '../ledger/ledger.js';
import { isFollowable } from '../ledger/ledger.js';
import type { TaskHandle } from '../taskHandle.js';
import { SelfFence } from './selfFence.js';

/** The most records one take-over tick claims; the rest wait for the next tick (or another worker). */
const TAKE_OVER_PAGE = 500;

/** Follow a record this process now holds: its handle, first polled at `at` (steady clock); see startFollowing. */
export type FollowHeld = (record: TaskRecord, at: number, claimedAt?: number) => TaskHandle;

export class LeaseKeeper {
  private leaseTimer: unknown;
  private takeOverTimer: unknown;
  private takingOver: Promise<void> | undefined;
  /** What this worker's own lease renewals and take-overs say of the ledger: lapsed leases are taken only through it. */
  private readonly gate: TakeoverGate;
  /** A take-over armed for when the gate opens, for records `resumeAll` found on lapsed leases before it was open. */
  private deferredTakeOver: unknown;
  /** When (steady clock) the first renewal goes out: the gate learns nothing of the ledger before it answers. */
  private firstRenewalAt = 0;
  /** Renewals sent and not yet answered. */
  private renewalsInFlight = 0;
  /** What this worker's confirmed lease writes say of how long its leases are surely its own (selfFence.ts). */
  readonly fence: SelfFence;

  /** `stopRounds`: stop the input rounds in progress on a record whose lease this process may be about to lose. */
  constructor(
    private readonly core: ClientCore,
    private readonly follow: FollowHeld,
    stopRounds: (recordId: string) => void,
  ) {
    this.gate = new TakeoverGate({ leaseMs: core.leaseMs, now: () => core.steady.now() });
    this.fence = new SelfFence({
      leaseMs: core.leaseMs,
      clock: core.steady,
      stop: stopRounds,
      renew: () => {
        if (this.renewalsInFlight === 0 && !core.closed) this.renew();
      },
    });
  }

  /** Start renewing this process's leases, and taking over records others let go when the options ask for it. */
  start(): void {
    this.armRenewal();
    this.armTakeOver();
  }

  /**
   * Ms until this process may take a lapsed lease from a holder not proven dead (0 when it may now), if the ledger
   * stays healthy: a lease after the first renewal's answer for a process just started, a lease after a stall.
   */
  takeoverOpensInMs(): number {
    if (this.gate.isOpen()) return 0;
    const firstAnswerBy = this.firstRenewalAt + this.core.leaseMs - this.core.steady.now();
    return Math.max(this.gate.opensInMs(), firstAnswerBy);
  }

  /** No more renewals or take-overs; a take-over tick under way finishes first (its records are then handed back). */
  async stop(): Promise<void> {
    const { clock } = this.core;
    if (this.leaseTimer !== undefined) clock.clearTimeout(this.leaseTimer);
    if (this.takeOverTimer !== undefined) clock.clearTimeout(this.takeOverTimer);
    if (this.deferredTakeOver !== undefined) clock.clearTimeout(this.deferredTakeOver);
    this.fence.stop();
    await this.takingOver;
  }

  /**
   * Take up records nobody follows any more: submissions whose holder stopped renewing become
   * `unknown-outcome` (surfaced, never re-sent), and open records with a free or lapsed lease are claimed (SKIP LOCKED
   * in a PostgreSQL ledger, so workers taking over at once split them) and followed here, queried first. A page at a
   * time: the cost of a tick is what it takes over, not what the ledger holds (docs/DESIGN.md rule 8).
   */
  private async takeOver(): Promise<TaskHandle[]> {
    const { core } = this;
    const now = core.clock.now();
    const claimedAt = core.steady.now();
    const sentAt = this.gate.clock();
    // a lease that ran out says its holder is gone only when this worker saw the ledger healthy for a whole lease
    // meanwhile (docs/DESIGN.md, "Rules learned in the field", 11; takeoverGate.ts); until then only free leases
    const claimableAt = this.lapsedBefore(now);
    let orphans: TaskRecord[];
    let claimed: Set<string>;
    const leaseExpiresAt = now + core.leaseMs;
    try {
      if (claimableAt === now) {
        const settled = await core.ledger.settleAbandonedSubmissions(
          core.endpoint,
          now,
          'found by a worker taking over',
        );
        for (const record of settled) core.emit({ type: 'closed', record });
      }
      orphans = (await core.ledger.list({ endpoint: core.endpoint, claimableAt, limit: TAKE_OVER_PAGE })).filter(
        (record) => !core.live.has(record.recordId),
      );
      claimed = new Set(
        orphans.length === 0
          ? []
          : await core.ledger.claimAll(
              orphans.map((record) => record.recordId),
              core.leaseHolder,
              leaseExpiresAt,
              claimableAt,
            ),
      );
      this.gate.answered(sentAt);
    } catch (error) {
      this.gate.failed();
      throw error;
    }
    return orphans
      .filter((record) => claimed.has(record.recordId))
      .map((record) =>
        this.follow(
          { ...record, localState: 'tracking', leaseHolder: core.leaseHolder, leaseExpiresAt },
          core.steady.now(),
          claimedAt,
        ),
      );
  }

  /**
   * The time before which a lapsed lease may be taken: now once the gate is open, else 1, which no lease of a live
   * holder ends before (a free lease, or one its holder handed back or was proven dead and freed, is still taken).
   */
  lapsedBefore(now: number): number {
    return this.gate.isOpen() ? now : 1;
  }

  /** After `resumeAll` left records on lapsed leases to the gate: take them over once it opens, if still unheld. */
  private takeOverWhenOpen(): void {
    const { core } = this;
    if (this.deferredTakeOver !== undefined || core.closed) return;
    const run = () => {
      this.deferredTakeOver = undefined;
      if (core.closed) return;
      if (!this.gate.isOpen()) {
        this.takeOverWhenOpen();
        return;
      }
      void this.takeOver().catch(() => undefined);
    };
    this.deferredTakeOver = core.clock.setTimeout(run, Math.max(50, this.gate.opensInMs() + 10));
    (this.deferredTakeOver as { unref?: () => void }).unref?.();
  }

  private armTakeOver(): void {
    const { core } = this;
    const every = core.options.takeOverEveryMs;
    if (every === undefined || every <= 0) return;
    const tick = async () => {
      if (core.closed) return;
      this.takingOver = this.takeOver().then(
        () => undefined,
        // a ledger that cannot be read now is tried again next tick; what this worker follows is unaffected
        () => undefined,
      );
      await this.takingOver;
      this.takingOver = undefined;
      if (core.closed) return;
      this.takeOverTimer = core.clock.setTimeout(() => void tick(), every);
      (this.takeOverTimer as { unref?: () => void }).unref?.();
    };
    this.takeOverTimer = core.clock.setTimeout(() => void tick(), every);
    (this.takeOverTimer as { unref?: () => void }).unref?.();
  }

  async resumeOpen(): Promise<ResumeReport> {
    const { core } = this;
    const held = await core.ledger.list({
      endpoint: core.endpoint,
      localStates: ['submitting', 'tracking', 'detached'],
    });
    // leases of holders proven dead are freed first, as on every other path (see freeLeasesOfDeadHolders)
    await this.freeLeasesOfDeadHolders(held);
    // lapsed leases only through the gate (see takeOver): a live worker's submissions are not settled for it
    const unknownOutcome = await core.ledger.settleAbandonedSubmissions(
      core.endpoint,
      this.lapsedBefore(core.clock.now()),
      'found on resume',
    );
    // settling touched only `submitting` records and freeing only leases, which the claim below decides on afresh
    const open = held.filter((record) => isFollowable(record.localState));
    const resumed: TaskHandle[] = [];
    const leasedElsewhere: TaskRecord[] = [];
    const unfollowed = open.filter((record) => {
      const live = core.live.get(record.recordId);
      if (live) resumed.push(live);
      return !live;
    });
    // every lease in one transaction: thousands of records are claimed in milliseconds, not one commit each
    const now = core.clock.now();
    const claimedAt = core.steady.now();
    const leaseExpiresAt = now + core.leaseMs;
    const claimableAt = this.lapsedBefore(now);
    const claimed = new Set(
      await core.ledger.claimAll(
        unfollowed.map((record) => record.recordId),
        core.leaseHolder,
        leaseExpiresAt,
        claimableAt,
      ),
    );
    for (const record of unfollowed) {
      if (!claimed.has(record.recordId)) {
        leasedElsewhere.push((await core.ledger.get(record.recordId)) ?? record);
        continue;
      }
      // what the claim changed, without reading 10,000 records back; the first poll (now) refreshes the rest
      const mine: TaskRecord = { ...record, localState: 'tracking', leaseHolder: core.leaseHolder, leaseExpiresAt };
      resumed.push(this.follow(mine, core.steady.now(), claimedAt));
    }
    // records on leases that lapsed before this worker could tell a dead holder from a stalled ledger: taken over
    // here once it can, unless their holder renews meanwhile
    const lapsed = (record: TaskRecord) =>
      record.leaseHolder !== core.leaseHolder && (record.leaseExpiresAt ?? 0) < now;
    const submissionsLeft = held.some((record) => record.localState === 'submitting' && lapsed(record));
    if (claimableAt !== now && (submissionsLeft || leasedElsewhere.some(lapsed))) this.takeOverWhenOpen();
    return { resumed, unknownOutcome, leasedElsewhere };
  }

  /** Take one record's lease: free, expired, ours, or held by a holder proven dead (then freed first). */
  async claimLease(recordId: string, now: number): Promise<boolean> {
    const { core } = this;
    const claimableAt = this.lapsedBefore(now);
    if (await core.ledger.claim(recordId, core.leaseHolder, now + core.leaseMs, claimableAt)) return true;
    const record = await core.ledger.get(recordId);
    if (!record || !(await this.freeLeasesOfDeadHolders([record]))) return false;
    return core.ledger.claim(recordId, core.leaseHolder, now + core.leaseMs, claimableAt);
  }

  /**
   * The client's one liveness rule (docs/DESIGN.md, rules learned in the field, 1), for every path that takes a record
   * over (`resumeAll`, `attach`, `callTool` with a known key): a lease whose holder is proven dead is freed at once
   * (`isDeadLocalHolder`); any other holder keeps it until it stops renewing it. True when a holder of `records` was
   * dead.
   */
  async freeLeasesOfDeadHolders(records: readonly TaskRecord[]): Promise<boolean> {
    const dead = new Set<string>();
    for (const { leaseHolder: holder } of records) {
      if (holder && holder !== this.core.leaseHolder && !dead.has(holder) && isDeadLocalHolder(holder))
        dead.add(holder);
    }
    for (const holder of dead) await this.core.ledger.releaseAllOf(holder);
    return dead.size > 0;
  }

  private armRenewal(): void {
    const { core } = this;
    const every = Math.max(1, Math.floor(core.leaseMs / 3));
    this.firstRenewalAt = core.steady.now() + every;
    const tick = () => {
      if (core.closed) return;
      this.renew();
      this.leaseTimer = core.clock.setTimeout(tick, every);
      // renewal alone must not keep a process alive: polls and waiters do
      (this.leaseTimer as { unref?: () => void }).unref?.();
    };
    this.leaseTimer = core.clock.setTimeout(tick, every);
    (this.leaseTimer as { unref?: () => void }).unref?.();
  }

  /** One renewal of every lease this process holds; its answer feeds the gate and the self-fence. */
  private renew(): void {
    const { core } = this;
    const at = core.clock.now();
    const sentAt = this.gate.clock();
    this.renewalsInFlight++;
    void core.ledger
      .renewLeases(core.leaseHolder, at + core.leaseMs)
      .then(
        () => {
          this.gate.answered(sentAt);
          this.fence.renewed(sentAt);
        },
        () => this.gate.failed(),
      )
      .finally(() => this.renewalsInFlight--);
  }
}
