/**
 * The status predicates of the task stores' SQL, written from the status machine
 * (protocol/status.ts) so that a status is named in one place. Each is built once, as literal text: a partial index
 * serves a query only when the query repeats the index's own predicate, which parameters would not
 * (test/server/store/statusSql.test.ts pins the shipped schemas against these).
 */
import type { TaskStatus } from '../protocol/schemas.js';
import { OPEN_STATUSES, TASK_STATUSES, TERMINAL_STATUSES } from '../protocol/status.js';

/** One status as an SQL string literal, checked against the machine at compile time. */
export function sqlStatus(status: TaskStatus): string {
  return `'${status}'`;
}

function statusIn(statuses: readonly TaskStatus[]): string {
  return `status IN (${statuses.map(sqlStatus).join(',')})`;
}

/** `status IN ('working','input_required')`: a task that may still change. */
export const OPEN_STATUS_SQL = statusIn(OPEN_STATUSES);

/** `status IN ('completed','failed','cancelled')`: a finished task. */
export const TERMINAL_STATUS_SQL = statusIn(TERMINAL_STATUSES);

/** Every status of the machine: what a `status` column's CHECK constraint allows. */
export const ANY_STATUS_SQL = statusIn(TASK_STATUSES);
