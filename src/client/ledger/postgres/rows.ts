/** The PostgreSQL ledger's rows as the driver hands them over, and the parameters its writes take (postgresLedger.ts). */
import type { TaskStatus } from '../../../protocol/index.js';
import type { applyObservedTask } from '../closing.js';
import type { LocalState, ObservedTask } from '../ledger.js';
import type { HistoryLine, InputRow, SubmissionRow as Row } from '../records.js';

/** PostgreSQL hands BIGINT over as a string; WITH_INPUTS adds the record's input rows. */
export interface SubmissionRow extends Row<string> {
  /** Present where the statement reads WITH_INPUTS; json_build_object turns BIGINT into a JSON number. */
  inputs?: InputRow[] | null;
}

export interface ClaimedRow {
  record_id: string;
  previous_state: LocalState;
  task_id: string | null;
  status: TaskStatus | null;
  status_message: string | null;
}

/** The parameters of an observed task, as commitTask and observe take them. */
export function taskParams(task: ObservedTask, applied: ReturnType<typeof applyObservedTask>, at: number): unknown[] {
  return [
    task.taskId,
    applied.localState,
    task.status,
    task.statusMessage ?? null,
    task.createdAt,
    task.lastUpdatedAt,
    task.ttlMs,
    task.pollIntervalMs ?? null,
    applied.result ? JSON.stringify(applied.result) : null,
    applied.error ? JSON.stringify(applied.error) : null,
    applied.terminalReason ?? null,
    applied.terminalReason === undefined ? null : at,
  ];
}

/** The parameters of one history line, as SQL.appendHistory takes them. */
export function historyParams(entry: HistoryLine): unknown[] {
  return [
    entry.recordId,
    entry.taskId ?? null,
    entry.status ?? null,
    entry.statusMessage ?? null,
    entry.localState,
    entry.serverUpdatedAt ?? null,
    entry.observedAt,
    entry.note ?? null,
  ];
}
