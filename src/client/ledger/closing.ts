/**
 * The client's rules for closing a record out (docs/DESIGN.md, "The task's life on the client", points 4 and 5): which
 * server answer closes a record, the terminal reason it records, and what an abandoned submission is told. These are
 * the client's rules, not a storage's: every Ledger applies them from here, so two ledgers cannot drift.
 */
import { isTerminalStatus } from '../../protocol/index.js';
import { storableText } from '../../protocol/storableText.js';
import type { LocalState, ObservedTask, RecordedError, TaskRecord } from './ledger.js';

/**
 * Whether an observed task closes the record out: a terminal status with what it carries (a `completed` task's
 * result, a `failed` task's error). A CreateTaskResult may report a terminal status without them (it is a `Task`,
 * not a `DetailedTask`): the record stays tracked until `tasks/get` delivers them.
 */
export function closesOut(task: ObservedTask): boolean {
  if (!isTerminalStatus(task.status)) return false;
  if (task.status === 'completed') return task.result !== undefined;
  if (task.status === 'failed') return task.error !== undefined;
  return true;
}

/** Whether an answer tells anything the record does not hold yet (an unchanged poll commits nothing). */
export function observationChanges(record: TaskRecord, task: ObservedTask): boolean {
  return (
    closesOut(task) ||
    record.taskId !== task.taskId ||
    record.status !== task.status ||
    record.statusMessage !== task.statusMessage ||
    record.lastUpdatedAt !== task.lastUpdatedAt ||
    record.createdAt !== task.createdAt ||
    record.ttlMs !== task.ttlMs ||
    // an answer without pollIntervalMs keeps the stored one
    (task.pollIntervalMs !== undefined && record.pollIntervalMs !== task.pollIntervalMs)
  );
}

/** What a record becomes when `task` is written to it (commitTask, recordObservation), and the columns it sets. */
export interface AppliedTask {
  localState: LocalState;
  /** Only a `completed` task's result and a `failed` task's error are kept: anything else is not the outcome. */
  result: ObservedTask['result'];
  error: ObservedTask['error'];
  /** Set exactly when the record closes out (docs/REQUIREMENTS.md S15: a closed record always says why). */
  terminalReason: string | undefined;
}

export function applyObservedTask(task: ObservedTask): AppliedTask {
  const terminal = closesOut(task);
  return {
    localState: terminal ? 'terminal' : 'tracking',
    result: task.status === 'completed' ? task.result : undefined,
    error: task.status === 'failed' ? task.error : undefined,
    terminalReason: terminal ? terminalReasonOf(task) : undefined,
  };
}

/** The terminal reason of a record closed by a terminal task: its status, and the error or status message. */
export function terminalReasonOf(task: ObservedTask): string {
  const base = `task ${task.status}`;
  // the server's error message is free text: kept alike on every ledger (docs/DESIGN.md rule 14)
  if (task.status === 'failed' && task.error) return storableText(`${base}: ${task.error.code} ${task.error.message}`);
  return task.statusMessage ? `${base}: ${task.statusMessage}` : base;
}

/** Why an abandoned submission is `unknown-outcome` (S13: surfaced, never re-sent), by whether tools/call had left. */
export function abandonedReason(reason: string, sentAt: number | null | undefined): string {
  return sentAt === null || sentAt === undefined
    ? `${reason}: the process ended before tools/call was sent`
    : `${reason}: tools/call was sent and no answer was recorded`;
}

/** The history note of a committed taskId; a late one (after the record was settled) says so (docs/DESIGN.md rule 10). */
export function commitNote(previous: { localState: LocalState; terminalReason: string | null | undefined }): string {
  return previous.localState === 'unknown-outcome'
    ? `task created; the tools/call answer arrived after the record was settled (${previous.terminalReason})`
    : 'task created';
}

/** The history note of an answer that ended a call without a task; a late one says so, as `commitNote` does. */
export function answeredNote(
  previous: { localState: LocalState; terminalReason: string | null | undefined },
  reason: string,
): string {
  return previous.localState === 'unknown-outcome'
    ? `${reason}; the tools/call answer arrived after the record was settled (${previous.terminalReason})`
    : reason;
}

/** The history note when a tools/call answer names a task another record of the endpoint already follows. */
export function taskHeldElsewhereNote(taskId: string, holderRecordId: string): string {
  return `tools/call answered task ${taskId}, which record ${holderRecordId} already follows`;
}

/**
 * The history note of a recorded error that is a step of the task's story, or undefined: a failed input handler is
 * (each attempt a line, where `lastError` keeps only the last); a failed poll is not, it recurs at every poll.
 */
export function errorNote(error: RecordedError): string | undefined {
  // a handler's message is free text: kept alike on every ledger (docs/DESIGN.md rule 14)
  return error.kind === 'input' ? storableText(error.message) : undefined;
}
