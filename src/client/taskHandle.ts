/**
 * A TaskHandle: the application's view of one task the TaskClient follows (docs/REQUIREMENTS.md S3, S4). Its state is a
 * cache of the ledger record, refreshed whenever a poll changed it; the ledger stays the truth.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

import type { JsonRpcError, TaskStatus } from '../protocol/index.js';
import { TaskClientError } from './errors.js';
import type { LocalState, TaskRecord } from './ledger/ledger.js';

/** How a task was closed out (docs/DESIGN.md, client step 4). */
export type TaskOutcome =
  | { kind: 'completed'; result: CallToolResult; record: TaskRecord }
  | { kind: 'failed'; error: JsonRpcError; record: TaskRecord }
  | { kind: 'cancelled'; record: TaskRecord }
  /** The handle is no longer usable: -32602 from tasks/get, or its ttlMs passed by this client's own clock (S13). */
  | { kind: 'expired'; reason: string; record: TaskRecord }
  /**
   * This process stopped following the task, which is still open on the server: the application detached the handle,
   * or closed the TaskClient first (`reason: 'client-closed'`). `resumeAll()` or `attach()` follows it again.
   */
  | { kind: 'detached'; record: TaskRecord; reason?: 'client-closed' };

/** What a handle needs from its TaskClient. */
export interface TaskHandleDriver {
  cancel(recordId: string): Promise<void>;
  detach(recordId: string): Promise<void>;
  record(recordId: string): Promise<TaskRecord>;
}

export class TaskHandle {
  readonly recordId: string;
  readonly taskId: string;
  private snapshot: TaskRecord;
  private settled: TaskOutcome | undefined;
  private readonly outcomePromise: Promise<TaskOutcome>;
  private resolveOutcome!: (outcome: TaskOutcome) => void;
  private rejectOutcome!: (error: unknown) => void;
  /** Made on the first `onChange`: most handles are only awaited, and 10,000 open ones would each hold an empty set. */
  private listeners: Set<(record: TaskRecord) => void> | undefined;

  /** @internal Created by TaskClient only. */
  constructor(
    record: TaskRecord & { taskId: string },
    private readonly driver: TaskHandleDriver,
  ) {
    this.recordId = record.recordId;
    this.taskId = record.taskId;
    this.snapshot = record;
    this.outcomePromise = new Promise<TaskOutcome>((resolve, reject) => {
      this.resolveOutcome = resolve;
      this.rejectOutcome = reject;
    });
    // a waiter that never looks must not turn a closed client into an unhandled rejection
    this.outcomePromise.catch(() => undefined);
    const outcome = outcomeOf(record);
    if (outcome) this.settle(outcome);
  }

  /** The last status observed from the server. */
  get status(): TaskStatus | undefined {
    return this.snapshot.status;
  }

  get statusMessage(): string | undefined {
    return this.snapshot.statusMessage;
  }

  get localState(): LocalState {
    return this.snapshot.localState;
  }

  /** The last ledger record this handle saw (refreshed whenever a poll changed it; `record()` reads the ledger). */
  get lastRecord(): TaskRecord {
    return this.snapshot;
  }

  /** Resolves once the task is closed out, whatever the outcome. */
  outcome(): Promise<TaskOutcome> {
    return this.outcomePromise;
  }

  /**
   * The CallToolResult once the task is `completed` (also when it has `isError: true`); rejects with a
   * TaskClientError (`failed`, `cancelled`, `expired`, `detached`, `closed`) otherwise (S10, S17).
   */
  async result(): Promise<CallToolResult> {
    const outcome = await this.outcomePromise;
    switch (outcome.kind) {
      case 'completed':
        return outcome.result;
      case 'failed':
        return Promise.reject(
          new TaskClientError('failed', `task ${this.taskId} failed: ${outcome.error.code} ${outcome.error.message}`, {
            record: outcome.record,
            error: outcome.error,
          }),
        );
      case 'cancelled':
        return Promise.reject(
          new TaskClientError('cancelled', `task ${this.taskId} was cancelled`, { record: outcome.record }),
        );
      case 'expired':
        return Promise.reject(
          new TaskClientError('expired', `task ${this.taskId} expired: ${outcome.reason}`, { record: outcome.record }),
        );
      case 'detached':
        return Promise.reject(
          outcome.reason === 'client-closed'
            ? new TaskClientError('closed', `the TaskClient closed before task ${this.taskId} ended`, {
                record: outcome.record,
              })
            : new TaskClientError('detached', `task ${this.taskId} was detached before it ended`, {
                record: outcome.record,
              }),
        );
    }
  }

  /** Ask the server to cancel (cooperative, S11): the task may still end otherwise; `outcome()` tells. */
  cancel(): Promise<void> {
    return this.driver.cancel(this.recordId);
  }

  /** Stop following the task in this process; the record stays open for `resumeAll()` or `attach()`. */
  detach(): Promise<void> {
    return this.driver.detach(this.recordId);
  }

  /** The current ledger record. */
  record(): Promise<TaskRecord> {
    return this.driver.record(this.recordId);
  }

  /**
   * Called with the record after every observed change, and after each failure of an input handler (the failure as
   * its `lastError`); returns the unsubscribe function.
   */
  onChange(listener: (record: TaskRecord) => void): () => void {
    const listeners = (this.listeners ??= new Set());
    listeners.add(listener);
    return () => listeners.delete(listener);
  }

  /** @internal The TaskClient saw a new record state. */
  observe(record: TaskRecord): void {
    if (this.settled) return;
    this.snapshot = record;
    for (const listener of this.listeners ?? []) {
      try {
        listener(record);
      } catch {
        // a listener's bug must not stop the client from following the task
      }
    }
    const outcome = outcomeOf(record);
    if (outcome) this.settle(outcome);
  }

  /**
   * @internal The TaskClient closed: the handle will not learn more in this process, and the task, still open, waits
   * in the ledger for a later `resumeAll()`. Its outcome is `detached`, as its type says.
   */
  clientClosed(): void {
    if (this.settled) return;
    this.settle({ kind: 'detached', record: this.snapshot, reason: 'client-closed' });
  }

  /** @internal The handle will not learn more in this process, for the reason `error` gives. */
  abandon(error: TaskClientError): void {
    if (this.settled) return;
    this.rejectOutcome(error);
  }

  private settle(outcome: TaskOutcome): void {
    this.settled = outcome;
    this.resolveOutcome(outcome);
  }
}

/** The outcome a record stands for, or undefined while it is open. */
export function outcomeOf(record: TaskRecord): TaskOutcome | undefined {
  switch (record.localState) {
    case 'terminal':
      if (record.status === 'completed' && record.result) {
        // the ledger keeps the result as the server sent it; callers get it as the SDK's callTool would give it
        const { resultType: _resultType, ...result } = record.result;
        return { kind: 'completed', result: result as CallToolResult, record };
      }
      if (record.status === 'failed' && record.error) return { kind: 'failed', error: record.error, record };
      if (record.status === 'cancelled') return { kind: 'cancelled', record };
      return undefined;
    case 'expired':
      return { kind: 'expired', reason: record.terminalReason ?? 'expired', record };
    case 'detached':
      return { kind: 'detached', record };
    default:
      return undefined;
  }
}
