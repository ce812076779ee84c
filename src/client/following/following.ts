/**
 * Following open tasks (docs/DESIGN.md, "The task's life on the client"): one PollScheduler polls every followed record
 * at the server's `pollIntervalMs`, records what the server says, routes `inputRequests`, and closes the record out at
 * the first terminal status (docs/REQUIREMENTS.md S7, S10), at the TTL backstop (S13) or on -32602. It also follows
 * the records its LeaseKeeper takes up (resume, attach, a known idempotency key, a fleet's take-over), cancels,
 * rechecks, and recovers a connection that closed.
 */
import { ProtocolError } from '@modelcontextprotocol/client';

import { ErrorCode, isTerminalStatus, TASK_METHODS } from '../../protocol/index.js';
import type { ClientCore } from '../core/clientCore.js';
import { describe } from '../core/clientCore.js';
import type { ResumeReport } from '../core/clientOptions.js';
import type { PollVerdict } from '../core/scheduler.js';
import { nextPollDelay, PollScheduler } from '../core/scheduler.js';
import { TaskClientError } from '../errors.js';
import type { InputRouter } from '../input/inputRouter.js';
import { observationChanges } from '../ledger/closing.js';
import type { ObservedTask, RecordedError, TaskRecord } from '../ledger/ledger.js';
import { isFollowable } from '../ledger/ledger.js';
import { outcomeOf, TaskHandle, type TaskHandleDriver } from '../taskHandle.js';
import { sdkServerOutputMessage } from '../transport/serverOutput.js';
import { LeaseKeeper } from './leaseKeeper.js';
import { PushFollower } from './pushFollower.js';
import type { TaskRequests } from './taskRequests.js';
import { checkTask } from './taskRequests.js';

/** How many times a connection that closed under the client is made again before the loss is surfaced. */
const RECONNECT_ATTEMPTS = 5;

/** One read of the leases of the records that fell due together: when it was made (steady clock), and what it found. */
interface LeaseRead {
  at: number;
  /** The records this process tracks among them; undefined when the read failed. */
  held: Promise<ReadonlySet<string> | undefined>;
}

export class Following {
  readonly scheduler: PollScheduler;
  /** The `subscriptions/listen` stream that carries the open tasks when the server pushes (pushFollower.ts). */
  readonly push: PushFollower;
  /** This process's leases: renewal, take-over, resume, the takeover gate (leaseKeeper.ts). */
  readonly leases: LeaseKeeper;
  private handleDriver: TaskHandleDriver | undefined;
  /** Set while the client recovers from a connection that closed under it. */
  private recovering: Promise<void> | undefined;
  /** Cuts the recovery's wait before its next attempt short (close() does not wait out a back-off). */
  private wakeRecovery: (() => void) | undefined;
  /** When (steady clock) this process claimed the record a handle follows, for a third of a lease (`stillHeld`). */
  private readonly claimedAt = new WeakMap<TaskHandle, number>();
  /** A lease read made for a handle's next poll with those of its wake-up (`readLeasesAhead`): when, and its answer. */
  private readonly leaseReadAhead = new WeakMap<TaskHandle, LeaseRead>();

  constructor(
    private readonly core: ClientCore,
    private readonly requests: TaskRequests,
    private readonly inputs: InputRouter,
  ) {
    this.leases = new LeaseKeeper(
      core,
      (record, at, claimedAt) => this.startFollowing(record, at, claimedAt),
      (recordId) => inputs.stopUnrenewed(recordId),
    );
    this.scheduler = new PollScheduler({
      poll: (recordId) => core.serialized(recordId, () => this.poll(recordId)),
      policy: core.options.pollPolicy,
      clock: core.steady,
      random: core.random,
      onScheduled: (recordId, nextPollAt) => {
        core.ledger.noteSchedule(recordId, core.leaseHolder, { nextPollAt: nextPollAt ?? null });
      },
      onPollError: (recordId, error) => {
        void core.recordError(recordId, { kind: 'storage', message: describe(error), at: core.clock.now() });
      },
      onDue: (recordIds) => this.readLeasesAhead(recordIds),
    });
    this.push = new PushFollower(
      core,
      requests,
      {
        observe: (recordId, taskId, params, fresh) => {
          void core.telemetry
            .notification(taskId, params['status'], () =>
              core.serialized(recordId, () => this.pushed(recordId, taskId, params, fresh)),
            )
            .catch((error: unknown) => {
              void core.recordError(recordId, { kind: 'storage', message: describe(error), at: core.clock.now() });
            });
        },
        pollNow: (recordId) => {
          if (this.scheduler.has(recordId)) this.scheduler.schedule(recordId, core.steady.now());
        },
        pollAtPace: (recordId) => {
          if (!this.scheduler.has(recordId)) return;
          const interval = core.live.get(recordId)?.lastRecord.pollIntervalMs;
          this.scheduler.schedule(
            recordId,
            core.steady.now() + nextPollDelay(interval, this.scheduler.policy, core.random),
          );
        },
      },
      core.options.push,
    );
  }

  /** Start renewing this process's leases, taking over records others let go (when asked to), and watching. */
  start(): void {
    this.leases.start();
    this.watchConnection();
  }

  // ---- taking records up ----

  resumeOpen(): Promise<ResumeReport> {
    return this.leases.resumeOpen();
  }

  async attachRecord(ref: string): Promise<TaskHandle> {
    const record = await this.core.resolve(ref);
    if (!record.taskId) {
      throw new TaskClientError('invalid-state', `record ${record.recordId} has no taskId (${record.localState})`, {
        record,
      });
    }
    if (!isFollowable(record.localState)) return this.closedHandle(record);
    const handle = await this.follow(record, true);
    if (!handle) {
      throw new TaskClientError('leased-elsewhere', `task ${record.taskId} is followed by ${record.leaseHolder}`, {
        record,
      });
    }
    return handle;
  }

  /** Claim the lease and schedule the record; undefined when another live process holds it. */
  async follow(record: TaskRecord, queryNow: boolean): Promise<TaskHandle | undefined> {
    const { core } = this;
    const existing = core.live.get(record.recordId);
    if (existing) return existing;
    const now = core.clock.now();
    const claimedAt = core.steady.now();
    if (!(await this.leases.claimLease(record.recordId, now))) return undefined;
    const claimed = await core.reload(record.recordId);
    // on resume the first thing is one query (S7, S12); a live handle waits for the suggested interval
    const steadyNow = core.steady.now();
    const at = queryNow
      ? steadyNow
      : steadyNow + nextPollDelay(claimed.pollIntervalMs, this.scheduler.policy, core.random);
    return this.startFollowing(claimed, at, claimedAt);
  }

  /**
   * Follow a record this process holds: a handle, and its first poll at `at` (steady clock). `claimedAt`: this process
   * claimed the lease just now (resume, attach, take-over), for `leaseMs` from the ledger time read at that steady
   * time; undefined when the lease came with a submission or a recheck. One record has one live handle: when
   * concurrent attach(), resumeAll() or callTool() calls claimed it too (a claim of a lease already ours succeeds), they all get the handle the first one made, which is the one every poll updates.
   */
  startFollowing(record: TaskRecord, at: number, claimedAt?: number): TaskHandle {
    if (claimedAt !== undefined) this.leases.fence.proven(record.recordId, claimedAt);
    const live = this.core.live.get(record.recordId);
    if (live) return live;
    const handle = new TaskHandle(record as TaskRecord & { taskId: string }, this.driver());
    if (claimedAt !== undefined) this.claimedAt.set(handle, claimedAt);
    // resumed, attached or taken over: its requests join the call's trace as the ledger kept it
    this.core.telemetry.follow(record);
    this.core.live.add(record.recordId, handle);
    this.scheduler.schedule(record.recordId, at);
    this.push.follow(record.recordId, handle.taskId);
    return handle;
  }

  closedHandle(record: TaskRecord): TaskHandle {
    return new TaskHandle(record as TaskRecord & { taskId: string }, this.driver());
  }

  // ---- polling ----

  /**
   * How long this client has seen a followed task open: what the ledger holds from earlier processes plus this
   * process's steady time since it took the record up. Time when no process followed it is not counted, so after a
   * restart the backstop comes later, never earlier (RELIABILITY.md, "Clocks").
   */
  private observedAge(record: TaskRecord): number {
    return this.core.live.observedAge(record, this.core.steady.now());
  }

  /**
   * The record as committed, when this process follows it; else it is released and undefined. While this process
   * holds the lease only its own observations change a record's task fields, so the handle's snapshot is the record as
   * committed; one indexed read checks the lease (`stillHeld`). Without a snapshot, or without the lease, the ledger
   * says.
   */
  private async followedRecord(recordId: string): Promise<(TaskRecord & { taskId: string }) | undefined> {
    const { core } = this;
    const handle = core.live.get(recordId);
    const snapshot = handle?.lastRecord;
    const record = handle && snapshot && (await this.stillHeld(handle)) ? snapshot : await core.ledger.get(recordId);
    if (!record || record.localState !== 'tracking' || record.leaseHolder !== core.leaseHolder || !record.taskId) {
      this.release(recordId, record);
      return undefined;
    }
    return record as TaskRecord & { taskId: string };
  }

  /**
   * Whether this process still holds the lease of the record `handle` follows. A claim gives a lease for `leaseMs`,
   * and another process takes a lease only once it ran out (docs/DESIGN.md, rules learned in the field, 1), so for a
   * third of a lease after this process claimed it (the renewal's own period) the answer is known without asking: a
   * resume of 10,000 records re-queries each without reading 10,000 leases back first (bench/RESULTS.md, section 22).
   * Past that, the read made for all the records that fell due with it (`readLeasesAhead`) when it is as fresh, else
   * one indexed read of its own. Nothing rests on this answer alone: what a poll writes (an observation, an input
   * asked, a close-out, a schedule note) is fenced by the holder in the ledger, and stored answers are sent only once
   * the record read before routing names this process (`observe`), so a lease lost anyway (another host's clock far
   * ahead) costs pure reads of the task until the next write or check finds it.
   */
  private async stillHeld(handle: TaskHandle): Promise<boolean> {
    const { core } = this;
    const now = core.steady.now();
    if (this.inClaimWindow(handle, now)) return true;
    this.claimedAt.delete(handle);
    const ahead = this.leaseReadAhead.get(handle);
    if (ahead) {
      this.leaseReadAhead.delete(handle);
      const held = now - ahead.at < core.leaseMs / 3 ? await ahead.held : undefined;
      if (held) return held.has(handle.recordId);
    }
    return core.ledger.isTrackedBy(handle.recordId, core.leaseHolder);
  }

  /**
   * The leases of the records that fell due together, read at once: a client waiting on 10,000 tasks at
   * `pollIntervalMs` 30 s wakes once a second for some 333 polls: one read of their leases, not 333 (on PostgreSQL
   * one round trip, not 333; bench/RESULTS.md, section 23). Each of those polls takes this answer when it starts
   * within a third of a lease of the read, as `stillHeld` takes a claim, else reads its own; a record still in its
   * claim's window needs no read, and a poll alone at its wake-up reads its own.
   */
  private readLeasesAhead(recordIds: readonly string[]): void {
    const { core } = this;
    const at = core.steady.now();
    const handles: TaskHandle[] = [];
    for (const recordId of recordIds) {
      const handle = core.live.get(recordId);
      if (handle && !this.inClaimWindow(handle, at)) handles.push(handle);
    }
    if (handles.length < 2) return;
    const held = core.ledger
      .trackedAmong(
        handles.map((handle) => handle.recordId),
        core.leaseHolder,
      )
      .catch(() => undefined); // a failed read: each poll reads its own lease, and meets the failure there
    const read: LeaseRead = { at, held };
    for (const handle of handles) this.leaseReadAhead.set(handle, read);
  }

  /** Whether `now` (steady clock) is within a third of a lease of this process's claim of the handle's record. */
  private inClaimWindow(handle: TaskHandle, now: number): boolean {
    const claimedAt = this.claimedAt.get(handle);
    return claimedAt !== undefined && now - claimedAt < this.core.leaseMs / 3;
  }

  /** One scheduled poll of one record. Never throws for anything the server does. */
  private async poll(recordId: string): Promise<PollVerdict> {
    const { core } = this;
    const record = await this.followedRecord(recordId);
    if (!record) return { kind: 'done' };
    const taskId = record.taskId;
    const sentAt = core.steady.now();
    const query = await this.requests.getTask(taskId, { taskId, status: record.status });
    if (query.kind === 'unanswered') return this.onPollError(record, query.error);
    if (query.kind === 'bad-output') {
      // a bad answer is recorded and ignored; the task keeps its last good state and is asked again later
      return this.retryAfter(record, { kind: 'server-output', message: query.error.message, at: core.clock.now() });
    }
    const outcome = await this.observe(record, query.task);
    if (outcome.kind !== 'continue') return outcome;
    this.push.polled(taskId, sentAt);
    return {
      kind: 'continue',
      pollIntervalMs: this.push.intervalFor(taskId, outcome.pollIntervalMs),
      safety: this.push.covers(taskId),
    };
  }

  /**
   * One `notifications/tasks` of a stream this client opened: validated and recorded exactly as a poll's answer
   * (docs/DESIGN.md rule 7, one observation path), so a notification and a poll of the same state are one observation.
   */
  private async pushed(
    recordId: string,
    taskId: string,
    params: Record<string, unknown>,
    fresh: () => boolean,
  ): Promise<void> {
    const { core } = this;
    const record = await this.followedRecord(recordId);
    if (!record || record.taskId !== taskId) return;
    const { _meta: _streamMeta, ...task } = params;
    const checked = checkTask(task, taskId, { taskId, status: record.status });
    if (checked.kind === 'bad-output') {
      // recorded and ignored, as a bad poll answer is; the next poll asks again
      await core.recordError(recordId, {
        kind: 'server-output',
        message: `notifications/tasks: ${checked.error.message}`,
        at: core.clock.now(),
      });
      return;
    }
    const outcome = await this.observe(record, checked.task);
    if (outcome.kind !== 'continue') {
      if (outcome.kind === 'done') this.scheduler.remove(recordId);
      return;
    }
    if (!fresh()) return;
    const interval = this.push.intervalFor(taskId, outcome.pollIntervalMs);
    if (this.scheduler.has(recordId)) {
      this.scheduler.schedule(
        recordId,
        core.steady.now() + nextPollDelay(interval, this.scheduler.policy, core.random, true),
      );
    }
  }

  /**
   * What the server said of a followed task (a poll's answer or a pushed notification, validated): committed when it
   * changes the record, told to the handle, input routed, closed out at a terminal status or at the TTL backstop.
   */
  private async observe(record: TaskRecord & { taskId: string }, task: ObservedTask): Promise<PollVerdict> {
    const { core } = this;
    const { recordId, taskId } = record;
    const now = core.clock.now();
    // an answer that changes nothing commits nothing: only the poll time is noted (deferred, see noteSchedule)
    const changed = observationChanges(record, task);
    if (changed && !(await core.ledger.recordObservation(recordId, core.leaseHolder, task, now))) {
      this.release(recordId, await core.ledger.get(recordId));
      return { kind: 'done' };
    }
    const ageMs = this.observedAge(record);
    core.ledger.noteSchedule(recordId, core.leaseHolder, { polledAt: now, observedAgeMs: ageMs });
    // input routing reads the stored answers, so an input_required record is read afresh even when unchanged
    const observed = changed || task.status === 'input_required' ? await core.reload(recordId) : record;
    if (changed) core.live.get(recordId)?.observe(observed);
    // a new status message is progress ("Migrated 3 of 8"): the application hears of it as of a new status
    if (record.status !== task.status || record.statusMessage !== task.statusMessage) {
      core.emit({ type: 'status', record: observed });
    }
    if (isTerminalStatus(task.status)) {
      // close out: result or error stored, no tail polls, waiters resolved (S7, S10)
      this.release(recordId, observed);
      core.emit({ type: 'closed', record: observed });
      return { kind: 'done' };
    }
    if (task.status === 'input_required' && task.inputRequests) {
      // routing may send stored answers, which the record's holder alone does: the record just read says whether
      // that is still this process (a poll in the first third of a lease after a claim read no lease, see stillHeld)
      if (observed.leaseHolder !== core.leaseHolder || observed.localState !== 'tracking') {
        this.release(recordId, observed);
        return { kind: 'done' };
      }
      await this.inputs.route(observed, taskId, task.inputRequests);
    }
    // the TTL backstop (S13) on this client's own clock, never createdAt against it (docs/DESIGN.md, rule 2)
    if (task.ttlMs !== null && ageMs >= task.ttlMs) {
      await this.expire(
        recordId,
        `ttlMs (${task.ttlMs} ms) passed by this client's own clock without a terminal status (seen open ${Math.round(ageMs)} ms)`,
      );
      return { kind: 'done' };
    }
    return { kind: 'continue', pollIntervalMs: task.pollIntervalMs };
  }

  private async onPollError(record: TaskRecord, error: unknown): Promise<PollVerdict> {
    const { core } = this;
    const now = core.clock.now();
    if (error instanceof ProtocolError && error.code === ErrorCode.InvalidParams) {
      if (await core.underOtherCredential(record)) {
        // another principal's task looks unknown to us: that says nothing about the task (docs/DESIGN.md, rule 5); the
        // record stays open, free for a process that holds the credential it was created under
        const message = `tasks/get answered ${error.code} under another credential than the one that created the task: not taken as expiry`;
        await core.ledger.recordPoll(record.recordId, core.leaseHolder, now, {
          kind: 'protocol',
          message,
          at: now,
          code: error.code,
        });
        core.emit({ type: 'error', recordId: record.recordId, error: { kind: 'protocol', message, at: now } });
        this.scheduler.remove(record.recordId);
        await core.ledger.release(record.recordId, core.leaseHolder);
        const handle = core.live.drop(record.recordId);
        this.inputs.abandon(record.recordId);
        this.push.unfollow(record.recordId, handle?.taskId);
        handle?.abandon(new TaskClientError('wrong-credential', message, { record }));
        return { kind: 'done' };
      }
      // spec: -32602 is an invalid, unknown or purged taskId: the handle is no longer usable (S13)
      await this.expire(record.recordId, `tasks/get answered ${error.code}: ${error.message}`);
      return { kind: 'done' };
    }
    const badOutput = sdkServerOutputMessage(error);
    const lastError: RecordedError =
      badOutput !== undefined
        ? { kind: 'server-output', message: `tasks/get: ${badOutput}`, at: now }
        : this.requests.describeError('tasks/get', error);
    const ageMs = this.observedAge(record);
    core.ledger.noteSchedule(record.recordId, core.leaseHolder, { observedAgeMs: ageMs });
    if (typeof record.ttlMs === 'number' && ageMs >= record.ttlMs + core.ttlGraceMs) {
      await core.ledger.recordPoll(record.recordId, core.leaseHolder, now, lastError);
      await this.expire(
        record.recordId,
        `ttlMs (${record.ttlMs} ms) passed by this client's own clock and the server could not be queried: ${lastError.message}`,
      );
      return { kind: 'done' };
    }
    return this.retryAfter(record, lastError);
  }

  private async retryAfter(record: TaskRecord, lastError: RecordedError): Promise<PollVerdict> {
    if (!(await this.core.ledger.recordPoll(record.recordId, this.core.leaseHolder, lastError.at, lastError))) {
      this.release(record.recordId, record);
      return { kind: 'done' };
    }
    this.core.emit({ type: 'error', recordId: record.recordId, error: lastError });
    return { kind: 'retry', retryAfterMs: lastError.retryAfterMs };
  }

  private async expire(recordId: string, reason: string): Promise<void> {
    const { core } = this;
    const closed = await core.ledger.closeOut(
      recordId,
      core.leaseHolder,
      { localState: 'expired', reason },
      core.clock.now(),
    );
    const record = await core.ledger.get(recordId);
    // refused: the record is another process's now (or closed by it), and so is its close-out
    if (!closed) return this.release(recordId, record);
    if (record) {
      core.live.get(recordId)?.observe(record);
      core.emit({ type: 'closed', record });
    }
    this.release(recordId, record);
  }

  /** Stop following a record in this process (it was closed, detached, or taken by another process). */
  private release(recordId: string, record: TaskRecord | undefined): void {
    const { core } = this;
    this.scheduler.remove(recordId);
    this.inputs.abandon(recordId);
    const handle = core.live.drop(recordId);
    if (!handle) return;
    this.push.unfollow(recordId, handle.taskId);
    if (record) handle.observe(record);
    if (!record || outcomeOf(record) === undefined) {
      // still open, but no longer ours: another process took the lease
      handle.abandon(
        new TaskClientError('leased-elsewhere', `task ${handle.taskId} is now followed by ${record?.leaseHolder}`, {
          record,
        }),
      );
    }
  }

  // ---- what a caller asks of one record ----

  /**
   * Send `tasks/cancel` (S11): an acknowledged intent, not an outcome. The task is followed until it ends, which may
   * still be `completed`. -32602 marks the record expired.
   */
  async cancel(ref: string): Promise<void> {
    const { core } = this;
    core.assertOpen();
    const record = await core.resolve(ref);
    const taskId = record.taskId;
    if (!taskId) {
      throw new TaskClientError('invalid-state', `record ${record.recordId} has no task to cancel`, { record });
    }
    if (!isFollowable(record.localState)) return;
    await core.ledger.recordCancelRequest(record.recordId, core.clock.now());
    try {
      await this.requests.send(TASK_METHODS.cancel, { taskId });
    } catch (error) {
      if (error instanceof ProtocolError && error.code === ErrorCode.InvalidParams) {
        if (await core.underOtherCredential(record)) {
          const message = `tasks/cancel answered ${error.code} under another credential than the one that created the task: not taken as expiry`;
          await core.recordError(record.recordId, {
            kind: 'protocol',
            message,
            at: core.clock.now(),
            code: error.code,
          });
          throw new TaskClientError('wrong-credential', message, { record, cause: error });
        }
        await core.serialized(record.recordId, () =>
          this.expire(record.recordId, `tasks/cancel answered ${error.code}: ${error.message}`),
        );
        return;
      }
      await core.recordError(record.recordId, this.requests.describeError('tasks/cancel', error));
      throw error;
    }
    // look soon: the cancel may already have taken effect (the scheduler keeps the floor)
    if (this.scheduler.has(record.recordId)) this.scheduler.schedule(record.recordId);
  }

  async refresh(ref: string): Promise<TaskRecord> {
    const { core } = this;
    const record = await core.resolve(ref);
    if (!record.taskId) return record;
    if (record.localState === 'tracking' && record.leaseHolder === core.leaseHolder) {
      await core.serialized(record.recordId, () => this.poll(record.recordId));
    } else if (record.localState === 'terminal') {
      await core.serialized(record.recordId, () => this.verifyTerminal(record));
    } else if (record.localState === 'expired') {
      await core.serialized(record.recordId, () => this.recheckExpired(record, false));
    }
    return core.reload(record.recordId);
  }

  async recheck(ref: string): Promise<TaskHandle | undefined> {
    const { core } = this;
    const record = await core.resolve(ref);
    if (record.localState !== 'expired' || !record.taskId) return undefined;
    const reopened = await core.serialized(record.recordId, () => this.recheckExpired(record, true));
    if (!reopened) return undefined;
    const current = await core.reload(record.recordId);
    if (current.localState !== 'tracking') return this.closedHandle(current);
    return core.live.get(record.recordId) ?? this.startFollowing(current, core.steady.now());
  }

  /**
   * One tasks/get for an expired record; true when the record came back (tracked, or closed out terminal). A record
   * tracked again keeps this process's lease only when `follow` (the caller then follows it).
   */
  private async recheckExpired(record: TaskRecord, follow: boolean): Promise<boolean> {
    const { core } = this;
    const taskId = record.taskId as string;
    const query = await this.requests.getTask(taskId);
    if (query.kind !== 'task') {
      const lastError =
        query.kind === 'bad-output'
          ? { kind: 'server-output' as const, message: query.error.message, at: core.clock.now() }
          : this.requests.describeError('tasks/get', query.error);
      await core.recordError(record.recordId, lastError);
      return false;
    }
    const task = query.task;
    const now = core.clock.now();
    const note = `checked again: the server still knows task ${taskId} (${task.status})`;
    if (!(await core.ledger.reopen(record.recordId, core.leaseHolder, now + core.leaseMs, now, note))) return false;
    core.live.restartAge(record.recordId);
    await core.ledger.recordObservation(record.recordId, core.leaseHolder, task, now);
    const current = await core.reload(record.recordId);
    core.emit({ type: 'status', record: current });
    if (current.localState !== 'tracking') {
      core.emit({ type: 'closed', record: current });
    } else if (!follow) {
      await core.ledger.release(record.recordId, core.leaseHolder);
    }
    return true;
  }

  private async verifyTerminal(record: TaskRecord): Promise<void> {
    const taskId = record.taskId as string;
    const query = await this.requests.getTask(taskId, { taskId, status: record.status });
    if (query.kind === 'unanswered') {
      // a purged terminal task answers -32602: that is allowed after its retention
      if (!(query.error instanceof ProtocolError && query.error.code === ErrorCode.InvalidParams)) {
        await this.core.recordError(record.recordId, this.requests.describeError('tasks/get', query.error));
      }
      return;
    }
    if (query.kind === 'bad-output') {
      await this.core.recordError(record.recordId, {
        kind: 'server-output',
        message: query.error.message,
        at: this.core.clock.now(),
      });
    }
  }

  /** One driver for every handle (it takes the recordId): not three closures per open task. */
  private driver(): TaskHandleDriver {
    return (this.handleDriver ??= {
      cancel: (recordId: string) => this.cancel(recordId),
      detach: (recordId: string) => this.detach(recordId),
      record: (recordId: string) => this.core.reload(recordId),
    });
  }

  private async detach(recordId: string): Promise<void> {
    const { core } = this;
    await core.serialized(recordId, async () => {
      this.scheduler.remove(recordId);
      await core.ledger.detach(recordId, core.leaseHolder, core.clock.now());
      const record = await core.ledger.get(recordId);
      this.release(recordId, record);
    });
  }

  // ---- leases, the connection, and stopping ----

  /**
   * Stop following in this process: leases handed back, handles settled as `closed`. The front calls it once the
   * operations under way have finished.
   */
  async stop(): Promise<void> {
    const { core } = this;
    this.wakeRecovery?.();
    await this.recovering;
    this.push.stop();
    // a take-over tick under way finishes first, so what it claimed is handed back below with the rest
    await this.leases.stop();
    this.scheduler.stop();
    await this.inputs.close();
    await this.scheduler.whenIdle();
    await core.serialIdle();
    // the leases go back before the handles settle, as when the connection is lost (recoverConnection)
    const open = core.live.dropAll();
    await Promise.all(open.map(([recordId]) => core.ledger.release(recordId, core.leaseHolder).catch(() => undefined)));
    for (const [, handle] of open) handle.clientClosed();
  }

  /**
   * Notice a connection that closes under the client: the SDK calls `onclose` when its transport
   * closes (a stdio server that exited), and every later request fails at once. Chained, so an application's own
   * `onclose` still runs.
   */
  private watchConnection(): void {
    const client = this.core.client;
    const previous = client.onclose;
    client.onclose = () => {
      try {
        previous?.();
      } finally {
        if (!this.core.closed && !this.recovering) {
          this.recovering = this.recoverConnection().finally(() => (this.recovering = undefined));
        }
      }
    };
  }

  /**
   * Record the loss on every followed task, then connect again (bounded attempts, backed off) and query each task
   * once (docs/DESIGN.md rule 7: after a reconnect one tasks/get per task closes the gap); when that is not possible,
   * settle the handles as `disconnected` and hand their leases back, so nothing polls a closed connection.
   */
  private async recoverConnection(): Promise<void> {
    const { core } = this;
    const lost: RecordedError = {
      kind: 'transport',
      message: 'the connection to the server closed (its process exited?)',
      at: core.clock.now(),
    };
    await Promise.all(core.live.recordIds().map((recordId) => core.recordError(recordId, lost)));
    const reconnect = core.options.reconnect;
    let failure: unknown = lost.message;
    if (reconnect) {
      const policy = this.scheduler.policy;
      for (let attempt = 0; attempt < RECONNECT_ATTEMPTS && !core.closed; attempt += 1) {
        if (attempt > 0) {
          const delay = Math.min(policy.backoffCapMs, policy.backoffBaseMs * 2 ** attempt);
          await new Promise<void>((resolve) => {
            const timer = core.clock.setTimeout(resolve, delay);
            this.wakeRecovery = () => {
              core.clock.clearTimeout(timer);
              resolve();
            };
          });
          this.wakeRecovery = undefined;
          if (core.closed) return;
        }
        try {
          await reconnect();
          // the scheduler runs on the steady clock (RELIABILITY.md, "Clocks, credentials and keys")
          const now = core.steady.now();
          for (const recordId of core.live.recordIds()) this.scheduler.schedule(recordId, now);
          return;
        } catch (error) {
          failure = error;
        }
      }
    }
    if (core.closed) return;
    const reason = `the connection to the server closed and could not be made again: ${describe(failure)}`;
    const abandoned = core.live.dropAll();
    for (const [recordId, handle] of abandoned) {
      this.scheduler.remove(recordId);
      this.inputs.abandon(recordId);
      this.push.unfollow(recordId, handle.taskId);
    }
    // the leases go back before the handles settle: whatever the rejection wakes finds the records free to resume
    await Promise.all(
      abandoned.map(([recordId]) => core.ledger.release(recordId, core.leaseHolder).catch(() => undefined)),
    );
    for (const [, handle] of abandoned) {
      handle.abandon(new TaskClientError('disconnected', `${reason} (task ${handle.taskId} is still open)`));
    }
  }
}
