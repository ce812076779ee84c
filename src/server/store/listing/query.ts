/**
 * The operators' listing of a task store: which tasks it holds, newest first, filtered, a page at a time, and how many
 * of each status. It reads every principal's tasks, so it is never served over MCP (the tasks extension has no
 * `tasks/list`: a caller must not enumerate tasks, spec "Security"); it is for the operator's own tools (`closeout
 * tasks`, the console). This module checks a query and builds its SQL for both stores; `sqlite.ts` and `postgres.ts`
 * run it.
 */
import type { TaskStatus } from '../../../protocol/index.js';
import { TASK_STATUSES } from '../../../protocol/status.js';
import {
  type CheckedListingQuery,
  listingLimit,
  listingPage,
  listingPosition,
  ListingQueryError,
  listingStatuses,
  listingText,
  prefixEnd,
} from '../../../shared/listingPages.js';
import { sqlStatus } from '../../../shared/statusSql.js';

/** Which tasks to list or count. Every filter given must hold (AND); none given: every task. */
export interface TaskListQuery {
  /** One status or several (any of them). */
  status?: TaskStatus | readonly TaskStatus[] | undefined;
  toolName?: string | undefined;
  /** The caller's principal the task belongs to (`StoredTask.principal`). */
  principal?: string | undefined;
  /** Created at or after this time (epoch ms). */
  createdFrom?: number | undefined;
  /** Created before this time (epoch ms). */
  createdBefore?: number | undefined;
  /** The task id starts with this (case-sensitive). */
  taskIdPrefix?: string | undefined;
  /** The idempotency key the task was created with is exactly this, whichever principal's task it is. */
  idempotencyKey?: string | undefined;
  /**
   * What a person pastes into a search box: a task whose id starts with this, or whose idempotency key is exactly
   * this (the ledger's `search` also matches its own record and correlation ids; the store has neither).
   */
  search?: string | undefined;
  /** Tasks per page, 1 to 1000 (MAX_LISTING_LIMIT); default 50. Not used by `countTasks`. */
  limit?: number | undefined;
  /** `nextCursor` of the page before; absent for the first page. Not used by `countTasks`. */
  cursor?: string | undefined;
}

/** A task as listed: what an operator scans a list for, without its arguments, result or inputs (`get` has those). */
export interface TaskSummary {
  taskId: string;
  principal: string;
  toolName: string;
  status: TaskStatus;
  statusMessage: string | undefined;
  createdAt: number;
  lastUpdatedAt: number;
  ttlMs: number | null;
  /** How many times a handler was started for the task. */
  attempt: number;
  cancelRequested: boolean;
  leaseHolder: string | undefined;
  leaseExpiresAt: number | undefined;
}

/** One page of a listing, newest first (by `createdAt`, then `taskId`). */
export interface TaskListPage {
  tasks: TaskSummary[];
  /** Pass as `cursor` for the next page; undefined on the last page. */
  nextCursor: string | undefined;
}

/** How many tasks match a query, per status (every status present, 0 when none). */
export type TaskCounts = Record<TaskStatus, number>;

/** A listing query the store refuses: says which field is wrong and why. Nothing was read. */
export class TaskListQueryError extends ListingQueryError {}

/** A query checked: statuses as a list of known ones, the cursor decoded (`after`: a task's `createdAt`, `taskId`). */
interface CheckedQuery extends CheckedListingQuery<TaskStatus> {
  toolName: string | undefined;
  principal: string | undefined;
  createdFrom: number | undefined;
  createdBefore: number | undefined;
  taskIdPrefix: string | undefined;
  idempotencyKey: string | undefined;
  search: string | undefined;
}

function checkedTime(field: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw new TaskListQueryError(`${field} must be a time in ms since the epoch (an integer)`);
  }
  return value;
}

/** Checks every field of a query; throws TaskListQueryError naming the first one that is wrong. */
export function checkQuery(query: TaskListQuery): CheckedQuery {
  const limit = listingLimit(query.limit, TaskListQueryError);
  const prefix = listingText('taskIdPrefix', query.taskIdPrefix, TaskListQueryError);
  const search = listingText('search', query.search, TaskListQueryError);
  return {
    statuses: listingStatuses(query.status, TASK_STATUSES, TaskListQueryError),
    toolName: listingText('toolName', query.toolName, TaskListQueryError),
    principal: listingText('principal', query.principal, TaskListQueryError),
    createdFrom: checkedTime('createdFrom', query.createdFrom),
    createdBefore: checkedTime('createdBefore', query.createdBefore),
    taskIdPrefix: prefix === '' ? undefined : prefix,
    idempotencyKey: listingText('idempotencyKey', query.idempotencyKey, TaskListQueryError),
    search: search === '' ? undefined : search,
    limit,
    after: listingPosition(query.cursor, TaskListQueryError),
  };
}

/** What differs between the stores' SQL. */
export interface ListingDialect {
  /** The tasks table. */
  table: string;
  /** The placeholder of the n-th value (1-based). */
  placeholder: (n: number) => string;
  /** The task id as compared for a prefix: in code point order, on an index. */
  taskIdInCodePointOrder: string;
  /**
   * The status as a narrowed query checks it, row by row rather than on its index: a planner without statistics
   * (SQLite's) would read a whole status's slice of its index, tens of thousands of tasks, before the narrower filter's.
   */
  statusChecked: string;
}

/** An SQL statement and its values. */
export interface Statement {
  text: string;
  values: unknown[];
}

/** The columns a summary is read from (taskRows.ts's `SummaryColumns`). */
const SUMMARY_COLUMNS = `task_id, owner, tool_name, status, status_message, created_at, last_updated_at, ttl_ms, attempt,
  cancel_requested, lease_owner, lease_expires_at`;

/** Newest first; the task id breaks ties, so the order is total and a cursor never skips or repeats a task. */
const NEWEST_FIRST = 'ORDER BY created_at DESC, task_id DESC';

/**
 * The conditions of every filter but status, and the cursor's, as SQL on `values` (appended to). Each is a range or an
 * equality on a column the listing indexes lead with, or on `created_at` after one of them.
 */
function filterConditions(q: CheckedQuery, dialect: ListingDialect, values: unknown[], cursor: boolean): string[] {
  const value = (v: unknown) => {
    values.push(v);
    return dialect.placeholder(values.length);
  };
  const conditions: string[] = [];
  if (q.principal !== undefined) conditions.push(`owner = ${value(q.principal)}`);
  if (q.toolName !== undefined) conditions.push(`tool_name = ${value(q.toolName)}`);
  if (q.createdFrom !== undefined) conditions.push(`created_at >= ${value(q.createdFrom)}`);
  if (q.createdBefore !== undefined) conditions.push(`created_at < ${value(q.createdBefore)}`);
  const prefixed = (prefix: string) => {
    const end = prefixEnd(prefix);
    const from = `${dialect.taskIdInCodePointOrder} >= ${value(prefix)}`;
    return end === undefined ? from : `${from} AND ${dialect.taskIdInCodePointOrder} < ${value(end)}`;
  };
  if (q.taskIdPrefix !== undefined) conditions.push(prefixed(q.taskIdPrefix));
  // the key is stored as the caller sent it; the unique index on (idempotency_key, owner) finds it for any owner
  if (q.idempotencyKey !== undefined) conditions.push(`idempotency_key = ${value(q.idempotencyKey)}`);
  if (q.search !== undefined) {
    conditions.push(`((${prefixed(q.search)}) OR idempotency_key = ${value(q.search)})`);
  }
  if (cursor && q.after !== undefined) {
    const [createdAt, taskId] = q.after;
    conditions.push(`(created_at, task_id) < (${value(createdAt)}, ${value(taskId)})`);
  }
  return conditions;
}

/** Whether a filter with an index of its own narrows the query: a principal, a tool, a task id prefix, a key. */
function isNarrowed(q: CheckedQuery): boolean {
  return (
    q.principal !== undefined ||
    q.toolName !== undefined ||
    q.taskIdPrefix !== undefined ||
    q.idempotencyKey !== undefined ||
    q.search !== undefined
  );
}

function statusIn(statuses: readonly TaskStatus[], column = 'status'): string {
  return `${column} IN (${statuses.map(sqlStatus).join(', ')})`;
}

function where(conditions: string[]): string {
  return conditions.length === 0 ? '' : `WHERE ${conditions.join(' AND ')}`;
}

/**
 * One page, one row more than the limit (to know whether another page follows). Without a principal, tool, id prefix,
 * key or search to narrow by, it reads each status apart, newest first on the (status, created_at, task_id) index, at
 * most a page of each, and merges them: a page costs the same at 100,000 tasks as at 100. With one, the store's
 * planner picks the index on it (owner, tool_name: each followed by created_at, task_id; the task id's own; the
 * idempotency key's unique index, or both of the last two for a search) and checks the rest.
 */
export function listStatement(query: TaskListQuery, dialect: ListingDialect): Statement & { limit: number } {
  const q = checkQuery(query);
  const values: unknown[] = [];
  const conditions = filterConditions(q, dialect, values, true);
  values.push(q.limit + 1);
  const limit = dialect.placeholder(values.length);
  if (isNarrowed(q)) {
    if (q.statuses !== undefined) conditions.push(statusIn(q.statuses, dialect.statusChecked));
    return {
      text: `SELECT ${SUMMARY_COLUMNS} FROM ${dialect.table} ${where(conditions)} ${NEWEST_FIRST} LIMIT ${limit}`,
      values,
      limit: q.limit,
    };
  }
  const branches = (q.statuses ?? TASK_STATUSES).map(
    (status) =>
      `SELECT * FROM (SELECT ${SUMMARY_COLUMNS} FROM ${dialect.table}
         ${where([`status = ${sqlStatus(status)}`, ...conditions])} ${NEWEST_FIRST} LIMIT ${limit}) AS s_${status}`,
  );
  return {
    text: `SELECT * FROM (${branches.join(' UNION ALL ')}) AS page ${NEWEST_FIRST} LIMIT ${limit}`,
    values,
    limit: q.limit,
  };
}

/**
 * The count of each status asked for (all by default). Narrowed by a principal, tool, id prefix, key or search: one
 * statement on that index. By creation time alone: a branch per status, a range of the (status, created_at, task_id)
 * index each. Otherwise every task of the statuses counts, in one pass (over that index where the planner finds it cheaper).
 */
export function countStatement(query: TaskListQuery, dialect: ListingDialect): Statement {
  const q = checkQuery({ ...query, limit: undefined, cursor: undefined });
  const values: unknown[] = [];
  const conditions = filterConditions(q, dialect, values, false);
  const statuses = q.statuses ?? TASK_STATUSES;
  if (isNarrowed(q) || conditions.length === 0) {
    if (q.statuses !== undefined) {
      conditions.push(statusIn(q.statuses, isNarrowed(q) ? dialect.statusChecked : 'status'));
    }
    return {
      text: `SELECT status, COUNT(*) AS n FROM ${dialect.table} ${where(conditions)} GROUP BY status`,
      values,
    };
  }
  const branches = statuses.map(
    (status) =>
      `SELECT ${sqlStatus(status)} AS status, COUNT(*) AS n FROM ${dialect.table}
         ${where([`status = ${sqlStatus(status)}`, ...conditions])}`,
  );
  return { text: branches.join(' UNION ALL '), values };
}

/**
 * The page the rows of `listStatement` make (they hold at most one more than `limit`), each mapped by taskRows.ts's
 * `toTaskSummary`.
 */
export function toPage(rows: TaskSummary[], limit: number): TaskListPage {
  const { items, nextCursor } = listingPage(rows, limit, (task) => [task.createdAt, task.taskId]);
  return { tasks: items, nextCursor };
}

/** The counts the rows of `countStatement` make, every status present. */
export function toCounts(rows: Array<{ status: TaskStatus; n: number | string }>): TaskCounts {
  const counts = Object.fromEntries(TASK_STATUSES.map((status) => [status, 0])) as TaskCounts;
  for (const row of rows) counts[row.status] = Number(row.n);
  return counts;
}
