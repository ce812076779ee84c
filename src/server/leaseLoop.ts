/**
 * A TaskServer's background work, apart from the tasks it serves (as pg-boss keeps its maintenance apart from its
 * work): the lease loop (renew every lease this instance holds, fallback signals, take over orphans) and housekeeping
 * (expiry, purge), each on the one timer, housekeeping never in a renewal's way.
 */
import { ErrorCode } from '../protocol/index.js';
import { TakeoverGate } from '../shared/lease/takeoverGate.js';
import { SWEEP_PAGE } from './store/housekeeping.js';
import type { TaskStore } from './store/taskStore.js';
import type { RunningTask, TaskRuns } from './taskRuns.js';
import { INTERRUPTED_MESSAGE, type RegisteredTaskTool, type TaskActivity } from './taskServerOptions.js';
import type { ServerTelemetry } from './telemetry.js';

/** What the loop needs of its TaskServer. */
export interface LeaseLoopHost {
  store: TaskStore;
  instanceId: string;
  runs: TaskRuns;
  telemetry: ServerTelemetry;
  leaseMs: number;
  sweepIntervalMs: number;
  retentionMs: number;
  unlimitedRetentionMs: number;
  now: () => number;
  tool: (name: string) => RegisteredTaskTool | undefined;
  changed: (taskIds: string | string[]) => void;
  activity: (activity: TaskActivity) => void;
  report: (error: unknown) => void;
  /** Whether the server is closed: no tick starts, and a long claim or purge stops early. */
  isClosed: () => boolean;
}

export class LeaseLoop {
  /** What the loop's own statements say of the store: lapsed leases are taken only through it (takeOverOrphans). */
  private readonly gate: TakeoverGate;
  private timer: NodeJS.Timeout | undefined;
  /** The lease loop's tick in flight (renew, fallback signals, takeover). */
  private sweeping: Promise<void> | undefined;
  private sweepAgain = false;
  /** The housekeeping tick in flight (expiry, purge): on its own promise, so it never delays a renewal. */
  private housekeeping: Promise<void> | undefined;
  /** Whether the last renewal failed because the store could not be reached (reported once per outage). */
  private storeUnreachable = false;
  private started = false;
  /** What start() was given, until it has run once: ticks try it again while the store cannot answer it. */
  private prepare: (() => Promise<string[]>) | undefined;
  /** The holders the kernel proves dead, from `prepare`, until a tick has claimed their tasks. */
  private deadHolders: string[] = [];

  constructor(private readonly host: LeaseLoopHost) {
    this.gate = new TakeoverGate({ leaseMs: host.leaseMs, everyMs: host.sweepIntervalMs });
  }

  /**
   * Renewals may be asked for from now on; then `prepare` (the holders the kernel proves dead), the first tick taking
   * their tasks and those handed back, and the timer. Resolves after the first housekeeping. A store that cannot
   * answer `prepare` yet (down, shutting down, frozen) fails nothing: as any tick, the first one reports it, and each
   * later tick tries `prepare` again before it claims (docs/DESIGN.md, "Rules learned in the field", 3).
   */
  async start(prepare: () => Promise<string[]>): Promise<void> {
    this.started = true;
    this.prepare = prepare;
    await this.sweep();
    // the lease loop runs from here on, so the leases that first sweep took are renewed even while the first
    // housekeeping (expiry, purge) is slow, as it is against a database that has just come back
    const housekeepNow = () => {
      this.housekeeping ??= this.housekeep().finally(() => (this.housekeeping = undefined));
      return this.housekeeping;
    };
    this.timer = setInterval(() => {
      this.requestSweep();
      void housekeepNow();
    }, this.host.sweepIntervalMs);
    this.timer.unref();
    await housekeepNow();
  }

  /** Stops the timer (the server is closed already) and waits for the ticks in flight. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await Promise.all([this.sweeping, this.housekeeping]);
  }

  /** Runs a lease tick now, or right after the one in flight: a renewal is never skipped, and requests coalesce. */
  requestSweep(): void {
    if (!this.started || this.host.isClosed()) return;
    if (this.sweeping) {
      this.sweepAgain = true;
      return;
    }
    this.sweeping = this.sweep().finally(() => {
      this.sweeping = undefined;
      if (this.sweepAgain) {
        this.sweepAgain = false;
        this.requestSweep();
      }
    });
  }

  /**
   * One tick of the lease loop. Every lease this instance holds is renewed in one statement, whatever their number
   * (docs/DESIGN.md, "Rules learned in the field", 8); a run whose lease was not renewed lost it (the fence moved, or
   * the task ended elsewhere) and is aborted at once (rule 9). A renewal that failed because the store could not be
   * reached says nothing about the leases: the handlers keep running and the next tick renews them (rule 3), until
   * their leases could be taken (then TaskRuns stops them, and this hands their leases back once the store answers:
   * rule 13). Orphans are claimed only right after a renewal, so this instance never mistakes its own leases for
   * orphans.
   */
  private async sweep(): Promise<void> {
    const { runs } = this.host;
    try {
      const renewing = runs.all();
      if (!(await this.renew(renewing))) return;
      // runs that joined while that statement was out (a create or a claim that came back) are renewed before any
      // claim, so a slow create is never taken for an orphan by its own instance
      const renewed = new Set(renewing);
      const joined = runs.all().filter((r) => !renewed.has(r));
      if (joined.length > 0 && !(await this.renew(joined))) return;
      if (!(await this.handBackUnrenewed())) return;
      // fallback for a missed input signal: one read for every awaited key
      await runs.deliverAnswersTo(runs.all().filter((r) => r.waiters.size > 0));
      // after the renewals, so a store that answers them but not this never costs a lease; an outage is said once
      if (this.prepare) {
        try {
          this.deadHolders = await this.prepare();
        } catch (error) {
          this.unreachable(error);
          return;
        }
        this.prepare = undefined;
      }
      await this.takeOverOrphans(this.deadHolders);
      // kept until a claim of their tasks went through
      this.deadHolders = [];
    } catch (error) {
      this.gate.failed();
      this.host.report(error);
    }
  }

  /** Renews the runs' leases in one statement and acts on the answer; false when the store could not be reached. */
  private async renew(renewing: RunningTask[]): Promise<boolean> {
    const { runs, store } = this.host;
    const sentAt = this.gate.clock();
    let renewed;
    try {
      renewed = await store.renewLeases(
        this.host.instanceId,
        renewing.map((r) => r.lease),
        this.host.now() + this.host.leaseMs,
      );
      // no lease, no statement: only a renewal that went out says the store answers
      if (renewing.length > 0) this.gate.answered(sentAt);
    } catch (error) {
      this.unreachable(error);
      return false;
    }
    if (this.storeUnreachable) this.host.report(new Error('Task store reachable again, leases renewed'));
    this.storeUnreachable = false;
    const held = new Map(renewed.map((l) => [l.taskId, l]));
    for (const run of renewing) {
      const lease = held.get(run.lease.taskId);
      if (!lease || lease.fence !== run.lease.fence) {
        runs.loseLease(run);
        continue;
      }
      runs.proven(run, sentAt);
      // fallback for a missed cancel signal
      if (lease.cancelRequested) runs.abort(run, 'cancelled');
      // a run that waited for this proof of its lease starts now
      else runs.begin(run);
    }
    return true;
  }

  /**
   * Hands back (expiry 0) the leases of runs stopped because they could not be renewed in time, once the store answers:
   * their tasks are taken over at once, here or by another instance, as a new attempt, instead of a lease later. The
   * store leaves alone a lease another instance took meanwhile (its fence moved).
   */
  private async handBackUnrenewed(): Promise<boolean> {
    const { runs, store } = this.host;
    const leases = runs.takeUnrenewed();
    if (leases.length === 0) return true;
    const sentAt = this.gate.clock();
    try {
      await store.renewLeases(this.host.instanceId, leases, 0);
    } catch (error) {
      runs.keepUnrenewed(leases);
      this.unreachable(error);
      return false;
    }
    this.gate.answered(sentAt);
    return true;
  }

  /** A lease call failed: the store may be unreachable (reported once per outage), and the gate closes. */
  private unreachable(error: unknown): void {
    this.gate.failed();
    if (!this.storeUnreachable) {
      this.host.report(
        new Error(
          `Task store unreachable, keeping ${this.host.runs.size} running tasks while their leases last (until a fifth of a lease before another instance could take them) and renewing them once it is back: ${errorMessage(error)}`,
          { cause: error },
        ),
      );
    }
    this.storeUnreachable = true;
  }

  /**
   * Claims orphans in batches, for at most a third of a lease per tick so the next renewal is never late; what is
   * left is claimed on the next tick. A lease that ran out is taken only through the gate: after this instance saw the
   * store answer promptly for a whole lease (takeoverGate.ts; docs/DESIGN.md, "Rules learned in the field", 11).
   * Until then only leases handed back (expiry 0, see TaskServer.close) and those of holders proven dead are taken,
   * and the claim still goes out, as the probe that opens the gate.
   */
  private async takeOverOrphans(deadHolders: string[]): Promise<void> {
    const { runs, store, telemetry, leaseMs } = this.host;
    const tickStartedAt = this.gate.clock();
    for (;;) {
      const now = this.host.now();
      const sentAt = this.gate.clock();
      const expiredBefore = this.gate.isOpen() ? now : 1;
      let claimed;
      try {
        claimed = await store.claimOrphans(this.host.instanceId, expiredBefore, now + leaseMs, 100, deadHolders);
      } catch (error) {
        this.gate.failed();
        throw error;
      }
      this.gate.answered(sentAt);
      for (const task of claimed) {
        const lease = { taskId: task.taskId, fence: task.fence };
        const tool = this.host.tool(task.toolName);
        const ownRun = runs.get(task.taskId);
        if (runs.keepForCreation(task)) {
          // created here a moment ago, the create slower than the lease: launched under this claim once it is back
        } else if (ownRun && !ownRun.controller.signal.aborted) {
          // this instance's own run, whose lease ran out unrenewed (a slow or unreachable store): nobody else took it,
          // so the run goes on under the new fence, neither re-run nor failed (docs/DESIGN.md, "Rules learned in the
          // field", 3 and 9)
          ownRun.lease.fence = task.fence;
          runs.proven(ownRun, sentAt);
          runs.begin(ownRun);
          telemetry.leaseTakeover(task.toolName, 'continued');
          this.host.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'continued' });
        } else if (task.cancelRequested) {
          const finished = await store.finish(
            lease,
            { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' },
            now,
          );
          if (finished) this.host.changed(task.taskId);
          telemetry.leaseTakeover(task.toolName, 'cancelled');
          this.host.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'cancelled' });
        } else if (tool?.resumable && task.resumable) {
          runs.launchWhileHeld(tool, task);
          telemetry.leaseTakeover(task.toolName, 'rerun');
          this.host.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'rerun' });
        } else {
          const message = tool
            ? INTERRUPTED_MESSAGE
            : `${INTERRUPTED_MESSAGE} (tool ${task.toolName} is not registered on this server)`;
          const finished = await store.finish(
            lease,
            { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message },
            now,
          );
          if (finished) this.host.changed(task.taskId);
          telemetry.leaseTakeover(task.toolName, 'interrupted');
          this.host.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'interrupted' });
        }
      }
      if (claimed.length < 100 || this.host.isClosed() || this.gate.clock() - tickStartedAt > leaseMs / 3) return;
    }
  }

  /**
   * Expiry and purge, in small steps with the event loop free between them, apart from the lease tick so they never
   * delay a renewal. Purge goes on while there is work, for at most a third of a lease per tick: thousands of rows a
   * second, more than one instance creates (docs/DESIGN.md, "Rules learned in the field", 8).
   */
  private async housekeep(): Promise<void> {
    const { runs, store } = this.host;
    try {
      const now = this.host.now();
      for (;;) {
        const expired = await store.expireOverdue(now, SWEEP_PAGE);
        for (const taskId of expired) runs.abortIfRunning(taskId, 'expired');
        this.host.changed(expired);
        if (expired.length > 0) this.host.activity({ type: 'expired', count: expired.length });
        if (expired.length < SWEEP_PAGE || this.host.isClosed()) break;
        await yieldToServing();
      }
      const startedAt = performance.now();
      const options = { limit: SWEEP_PAGE, unlimitedRetentionMs: this.host.unlimitedRetentionMs };
      let purged = 0;
      for (;;) {
        const count = await store.purge(now, this.host.retentionMs, options);
        purged += count;
        if (count < SWEEP_PAGE || this.host.isClosed() || performance.now() - startedAt > this.host.leaseMs / 3) break;
        await yieldToServing();
      }
      if (purged > 0) this.host.activity({ type: 'purged', count: purged });
    } catch (error) {
      this.host.report(error);
    }
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Lets requests waiting on the event loop run between two steps of a sweep. */
function yieldToServing(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
