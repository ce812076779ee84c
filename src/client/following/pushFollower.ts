/**
 * Following open tasks by push (SEP-2663, "Task Status Notifications"; the stream is MCP 2026-07-28,
 * basic/patterns/subscriptions): one `subscriptions/listen` stream per endpoint carries every task this process
 * follows, renewed when a task joins that set. Push is an accelerator, polling the safety net (docs/DESIGN.md, rules learned
 * in the field, 7): a notification is handed to the same observation path as a poll's answer (`following.ts`), and a
 * task is polled at its normal pace whenever no trusted stream covers it: the server did not agree to its id, the
 * stream dropped, or the server does not push at all. While a stream covers it, it is still polled every
 * `safetyPollMs`.
 *
 * A stream is trusted for a task once something observed after the acknowledgement says how the task stands: a
 * notification of that stream, or a `tasks/get` sent after it. A task whose stream dropped is queried once as soon as
 * the next stream is acknowledged, which closes the gap before that stream is trusted.
 */
import { ProtocolError, SdkError, SdkErrorCode } from '@modelcontextprotocol/client';

import { ErrorCode } from '../../protocol/index.js';
import type { ClientCore } from '../core/clientCore.js';
import { describe } from '../core/clientCore.js';
import type { PushOptions, PushState } from '../core/pushOptions.js';
import type { TaskStream } from '../transport/sdkGlue.js';
import { listenForTasks } from '../transport/sdkGlue.js';
import type { TaskRequests } from './taskRequests.js';

export type { PushOptions, PushState } from '../core/pushOptions.js';

/** What the push follower asks of the following side (`following.ts`). */
export interface PushHooks {
  /**
   * One pushed task state, through the same path as a poll's answer. `fresh` is called once it was applied and the
   * task is still open: true when the stream is trusted for it, so its next poll may wait for the safety interval.
   */
  observe(recordId: string, taskId: string, params: Record<string, unknown>, fresh: () => boolean): void;
  /** Poll the record at once (the gap after a dropped stream). */
  pollNow(recordId: string): void;
  /** Poll the record at its normal pace again (it lost the stream that covered it). */
  pollAtPace(recordId: string): void;
}

const DEFAULT_SAFETY_POLL_MS = 30_000;
const DEFAULT_SAFETY_POLLS_PER_SECOND = 5;
const DEFAULT_RENEW_DELAY_MS = 50;
/** The renewal's wait per task the stream will carry (see `renewDelayMs`). */
const RENEW_DELAY_PER_TASK_MS = 2;
const RETRY_BASE_MS = 500;
const RETRY_CAP_MS = 60_000;
/** A stream that lived this long before it ended counts as healthy: the next one is opened without waiting. */
const STEADY_STREAM_MS = 5_000;

interface Stream {
  requested: ReadonlySet<string>;
  /** The ids the acknowledgement agreed to (those requested); undefined until it arrived. */
  agreed: Set<string> | undefined;
  /** When (steady clock) the acknowledgement arrived. */
  ackedAt: number | undefined;
  /** The acknowledgement had no `taskIds`: the server does not push task status. */
  refused: boolean;
  wire: TaskStream | undefined;
}

export class PushFollower {
  readonly safetyPollMs: number;
  private readonly safetyPollsPerSecond: number;
  private readonly enabled: boolean;
  private readonly renewDelayMs: number;
  /** Followed tasks: taskId -> recordId. */
  private readonly followed = new Map<string, string>();
  /** Tasks the current stream is trusted for. */
  private readonly trusted = new Set<string>();
  /** Tasks whose stream dropped: queried once as soon as the next stream is acknowledged. */
  private readonly gap = new Set<string>();
  /** Tasks whose gap query is scheduled: the stream is trusted for them once it was answered, not before. */
  private readonly gapQueried = new Set<string>();
  private current: Stream | undefined;
  private opening = false;
  private renewAgain = false;
  private renewTimer: unknown;
  /** The ids a server last agreed to none of: not asked again until a task outside them is followed. */
  private declined: ReadonlySet<string> | undefined;
  private failures = 0;
  /** Why the server will not push; set once, then every task is polled. */
  private unsupported: string | undefined;
  private lastError: string | undefined;
  private stopped = false;
  private lastState: string | undefined;

  constructor(
    private readonly core: ClientCore,
    private readonly requests: TaskRequests,
    private readonly hooks: PushHooks,
    options: PushOptions = {},
  ) {
    this.enabled = options.enabled ?? true;
    this.safetyPollMs = options.safetyPollMs ?? DEFAULT_SAFETY_POLL_MS;
    this.safetyPollsPerSecond = options.safetyPollsPerSecond ?? DEFAULT_SAFETY_POLLS_PER_SECOND;
    if (!(this.safetyPollsPerSecond > 0)) {
      throw new RangeError(`push.safetyPollsPerSecond must be a positive number (got ${this.safetyPollsPerSecond})`);
    }
    this.renewDelayMs = options.renewDelayMs ?? DEFAULT_RENEW_DELAY_MS;
    if (!this.enabled) this.unsupported = 'push is turned off for this client';
  }

  /** How tasks are followed now. */
  state(): PushState {
    const covered = this.covered();
    if (this.unsupported) return { mode: 'polling', reason: this.unsupported };
    if (covered > 0) return { mode: 'push', tasks: covered, safetyPollMs: this.safetyPollMs };
    if (this.lastError) return { mode: 'polling', reason: `no stream: ${this.lastError}` };
    if (this.declined !== undefined) return { mode: 'polling', reason: 'the server agreed to push none of the tasks' };
    if (this.followed.size === 0) return { mode: 'polling', reason: 'no open task' };
    return { mode: 'polling', reason: 'opening a stream' };
  }

  /** The followed tasks the current stream carries (it goes on carrying tasks that closed: they are not counted). */
  private covered(): number {
    const agreed = this.current?.agreed;
    if (!agreed) return 0;
    let covered = 0;
    for (const taskId of this.followed.keys()) if (agreed.has(taskId)) covered++;
    return covered;
  }

  follow(recordId: string, taskId: string): void {
    if (this.followed.get(taskId) === recordId) return;
    this.followed.set(taskId, recordId);
    if (!this.current?.requested.has(taskId)) this.changed();
  }

  unfollow(recordId: string, taskId: string | undefined): void {
    if (taskId === undefined || this.followed.get(taskId) !== recordId) return;
    this.followed.delete(taskId);
    this.trusted.delete(taskId);
    this.gap.delete(taskId);
    this.gapQueried.delete(taskId);
    // a set that shrank keeps its stream (see renew), unless nothing is left to follow
    if (this.followed.size === 0) this.changed();
  }

  /**
   * The interval to poll a task at after an answer that suggested `pollIntervalMs`: while a trusted stream covers it,
   * the safety interval, spread so that all the covered tasks together stay under `safetyPollsPerSecond` (and never
   * more often than the server asked).
   */
  intervalFor(taskId: string, pollIntervalMs: number | undefined): number | undefined {
    if (!this.trusted.has(taskId)) return pollIntervalMs;
    const spread = (this.trusted.size * 1000) / this.safetyPollsPerSecond;
    return Math.max(this.safetyPollMs, pollIntervalMs ?? 0, spread);
  }

  /** Whether a trusted stream covers the task now: its polls are safety polls, not held to the poll policy's cap. */
  covers(taskId: string): boolean {
    return this.trusted.has(taskId);
  }

  /** A `tasks/get` sent at `sentAt` (steady clock) was answered: it closes the gap when sent after the ack. */
  polled(taskId: string, sentAt: number): void {
    const stream = this.current;
    if (stream?.ackedAt !== undefined && stream.agreed?.has(taskId) && sentAt >= stream.ackedAt) {
      this.gapQueried.delete(taskId);
      this.trusted.add(taskId);
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.renewTimer !== undefined) this.core.clock.clearTimeout(this.renewTimer);
    this.renewTimer = undefined;
    const stream = this.current;
    this.current = undefined;
    this.trusted.clear();
    this.gapQueried.clear();
    void stream?.wire?.close().catch(() => undefined);
  }

  private changed(): void {
    if (this.stopped || this.unsupported || this.renewTimer !== undefined) return;
    this.renewTimer = this.core.clock.setTimeout(
      () => {
        this.renewTimer = undefined;
        void this.renew();
      },
      Math.max(this.renewDelayMs, this.followed.size * RENEW_DELAY_PER_TASK_MS),
    );
    (this.renewTimer as { unref?: () => void }).unref?.();
  }

  private retryLater(): void {
    if (this.stopped || this.unsupported || this.renewTimer !== undefined) return;
    const delay = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.max(0, this.failures - 1));
    this.renewTimer = this.core.clock.setTimeout(
      () => {
        this.renewTimer = undefined;
        void this.renew();
      },
      delay * (0.5 + 0.5 * this.core.random()),
    );
    (this.renewTimer as { unref?: () => void }).unref?.();
  }

  /**
   * Open a stream for the tasks followed now, unless the current one already asked for all of them. A set that only
   * shrank keeps its stream: a new one would send the state of every task it carries again (at 1,000 open tasks, 1,000
   * notifications for each that closes), and a stream that goes on carrying a closed task costs nothing, since the
   * server stops following a task once it sent its terminal state.
   */
  private async renew(): Promise<void> {
    if (this.stopped || this.unsupported) return;
    if (this.opening) {
      this.renewAgain = true;
      return;
    }
    const ids = [...this.followed.keys()];
    const current = this.current;
    if (ids.length === 0) {
      this.current = undefined;
      this.trusted.clear();
      await current?.wire?.close().catch(() => undefined);
      this.report();
      return;
    }
    if (current && within(ids, current.requested)) return;
    if (this.declined && within(ids, this.declined)) return;
    const stream: Stream = {
      requested: new Set(ids),
      agreed: undefined,
      ackedAt: undefined,
      refused: false,
      wire: undefined,
    };
    this.opening = true;
    try {
      stream.wire = await listenForTasks(
        this.core.client,
        ids,
        this.requests.tasksMeta(),
        {
          acknowledged: (taskIds) => this.acknowledged(stream, taskIds),
          task: (params) => this.notified(stream, params),
        },
        this.core.requestTimeoutMs,
      );
      this.lastError = undefined;
      if (stream.refused) {
        this.unsupported = 'the server does not push task status';
        await stream.wire.close().catch(() => undefined);
      } else if (stream.agreed?.size === 0) {
        this.declined = stream.requested;
        await stream.wire.close().catch(() => undefined);
      } else {
        void stream.wire.ended.then(() => this.ended(stream));
        if (this.stopped) await stream.wire.close().catch(() => undefined);
      }
    } catch (error) {
      if (unsupportedBy(error)) {
        this.unsupported = `the server does not push task status (${describe(error)})`;
      } else {
        this.failures += 1;
        this.lastError = describe(error);
        this.retryLater();
      }
    } finally {
      this.opening = false;
      this.report();
    }
    if (this.renewAgain) {
      this.renewAgain = false;
      await this.renew();
    }
  }

  /** The acknowledgement of `stream`: it becomes the current stream, the one before it is closed. */
  private acknowledged(stream: Stream, taskIds: unknown): void {
    if (!Array.isArray(taskIds)) {
      stream.refused = true;
      return;
    }
    // only ids this client asked for count; anything else the server lists is ignored
    stream.agreed = new Set(taskIds.filter((id): id is string => typeof id === 'string' && stream.requested.has(id)));
    if (stream.agreed.size === 0 || this.stopped) return;
    stream.ackedAt = this.core.steady.now();
    const previous = this.current;
    this.current = stream;
    // the previous stream was open until now, so a task it was trusted for and this one covers has no gap
    for (const taskId of [...this.trusted]) {
      if (stream.agreed.has(taskId)) continue;
      this.trusted.delete(taskId);
      const recordId = this.followed.get(taskId);
      if (recordId !== undefined) this.hooks.pollAtPace(recordId);
    }
    for (const taskId of [...this.gap]) {
      if (!stream.agreed.has(taskId)) continue;
      this.gap.delete(taskId);
      const recordId = this.followed.get(taskId);
      if (recordId === undefined) continue;
      this.gapQueried.add(taskId);
      this.hooks.pollNow(recordId);
    }
    void previous?.wire?.close().catch(() => undefined);
  }

  private notified(stream: Stream, params: Record<string, unknown>): void {
    const taskId = params['taskId'];
    // spec: notifications only for the ids the server agreed to; another is not this stream's business
    if (typeof taskId !== 'string' || !stream.agreed?.has(taskId)) return;
    const recordId = this.followed.get(taskId);
    if (recordId === undefined) return;
    this.hooks.observe(recordId, taskId, params, () => {
      // after a drop, the one tasks/get closes the gap; a notification meanwhile is recorded but does not replace it
      if (this.current !== stream || this.gapQueried.has(taskId)) return false;
      this.trusted.add(taskId);
      return true;
    });
  }

  /** The current stream ended without being closed here: its tasks are polled, and a new stream is opened. */
  private ended(stream: Stream): void {
    if (this.current !== stream || this.stopped) return;
    this.current = undefined;
    this.gapQueried.clear();
    for (const taskId of stream.agreed ?? []) {
      const recordId = this.followed.get(taskId);
      if (recordId === undefined) continue;
      this.gap.add(taskId);
      if (this.trusted.delete(taskId)) this.hooks.pollAtPace(recordId);
    }
    // a stream that lived a while is opened again at once; one that keeps ending right away is backed off
    const lived = stream.ackedAt === undefined ? 0 : this.core.steady.now() - stream.ackedAt;
    if (lived >= STEADY_STREAM_MS) this.failures = 0;
    this.failures += 1;
    this.lastError = 'the stream ended';
    this.report();
    if (this.failures <= 1) void this.renew();
    else this.retryLater();
  }

  /** Tell the application when the way tasks are followed changes. */
  private report(): void {
    const state = this.state();
    const text = JSON.stringify(state);
    if (text === this.lastState) return;
    this.lastState = text;
    this.core.emit({ type: 'push', state });
  }
}

function within(ids: readonly string[], set: ReadonlySet<string>): boolean {
  return ids.every((id) => set.has(id));
}

/** A refusal that will not change by asking again: a 2025-era connection, or no such method. */
function unsupportedBy(error: unknown): boolean {
  if (error instanceof SdkError) return error.code === SdkErrorCode.MethodNotSupportedByProtocolVersion;
  return error instanceof ProtocolError && error.code === ErrorCode.MethodNotFound;
}
