/**
 * The rows of the PostgreSQL task store as the driver returns them (mapped by taskRows.ts, for both dialects), and
 * the NOTIFY payload of a signal.
 */

import type { TaskRowColumns } from '../taskRows.js';
import { toStoredStep, toStoredTask } from '../taskRows.js';
import type { StoredStep, StoredTask, TaskSignal } from '../taskStore.js';

/**
 * A row of `closeout_tasks` (taskRows.ts names its columns), with its inputs when the statement reads them.
 */
export interface TaskRow extends TaskRowColumns {
  /** Absent from RETURNING of a fresh insert: a new task has no inputs. */
  inputs?: InputRow[] | null;
}

/** One element of the `inputs` aggregate: json_build_object turns BIGINT into a JSON number. */
export interface InputRow {
  key: string;
  request: string;
  response: string | null;
  requestedAt: number;
  answeredAt: number | null;
}

export function toTask(row: TaskRow): StoredTask {
  return toStoredTask(row, row.inputs ?? []);
}

/** A step row; BIGINT arrives as a string. */
export interface StepRow {
  name: string;
  result: string | null;
  committed_at: string;
}

/** COUNT and SUM of BIGINT arrive as strings. */
export interface StepTotals {
  steps: string;
  bytes: string;
  checkpoint_bytes: string;
}

export function toStep(row: StepRow): StoredStep {
  return toStoredStep(row);
}

export function signalPayload(signal: TaskSignal): string {
  return JSON.stringify({ taskId: signal.taskId, kind: signal.kind });
}

/** A notification payload as a TaskSignal, or undefined when it is not one of ours. */
export function parseSignal(payload: string | undefined): TaskSignal | undefined {
  if (payload === undefined) return undefined;
  try {
    const value = JSON.parse(payload) as { taskId?: unknown; kind?: unknown };
    const kind = value.kind;
    if (typeof value.taskId !== 'string' || (kind !== 'input' && kind !== 'cancel' && kind !== 'status')) {
      return undefined;
    }
    return { taskId: value.taskId, kind };
  } catch {
    return undefined;
  }
}
