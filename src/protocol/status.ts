/**
 * The task status machine (SEP-2663 "Task Status"): the one place that knows which statuses are terminal and which
 * transitions are allowed. Nobody else compares status strings by hand; the stores' and the ledger's SQL take their
 * status sets from here too (src/server/store/statusSql.ts).
 */
import type { TaskStatus } from './schemas.js';

export const TASK_STATUSES = ['working', 'input_required', 'completed', 'failed', 'cancelled'] as const;

export type TerminalStatus = 'completed' | 'failed' | 'cancelled';

// frozen: the predicates below and the SQL (src/server/store/statusSql.ts) read these sets, so nobody may change them at run time
export const TERMINAL_STATUSES: readonly TaskStatus[] = Object.freeze([
  'completed',
  'failed',
  'cancelled',
] satisfies TerminalStatus[]);

/** The statuses of a task that may still change (spec: not terminal): every status that is not terminal. */
export const OPEN_STATUSES: readonly TaskStatus[] = Object.freeze(
  TASK_STATUSES.filter((status) => !TERMINAL_STATUSES.includes(status)),
);

export function isTerminalStatus(status: TaskStatus): status is TerminalStatus {
  return TERMINAL_STATUSES.includes(status);
}

/**
 * Whether a task may move from `from` to `to`. A terminal task never changes again (spec: "A terminal task never
 * changes state"); a non-terminal task may move between `working` and `input_required` and to any terminal status.
 * Staying in the same non-terminal status is allowed (a new status message, a new input request).
 */
export function canTransition(from: TaskStatus, to: TaskStatus): boolean {
  return !isTerminalStatus(from) && TASK_STATUSES.includes(to);
}
