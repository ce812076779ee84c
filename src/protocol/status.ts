/**
 * The task status machine (SEP-2663 "Task Status"): the one place that knows which statuses are terminal and which
 * transitions are allowed. Nobody else compares status strings by hand.
 */
import type { TaskStatus } from './schemas.js';

export const TASK_STATUSES = ['working', 'input_required', 'completed', 'failed', 'cancelled'] as const;

export const TERMINAL_STATUSES: readonly TaskStatus[] = ['completed', 'failed', 'cancelled'];

export type TerminalStatus = 'completed' | 'failed' | 'cancelled';

export function isTerminalStatus(status: TaskStatus): status is TerminalStatus {
  return status === 'completed' || status === 'failed' || status === 'cancelled';
}

/**
 * Whether a task may move from `from` to `to`. A terminal task never changes again (spec: "A terminal task never
 * changes state"); a non-terminal task may move between `working` and `input_required` and to any terminal status.
 * Staying in the same non-terminal status is allowed (a new status message, a new input request).
 */
export function canTransition(from: TaskStatus, to: TaskStatus): boolean {
  return !isTerminalStatus(from) && TASK_STATUSES.includes(to);
}
