/**
 * A ledger's records listed for people (the console, docs/cli.md "The console"): newest first, filtered by status, tool
 * or a search, a page at a time, with how many of each status. Both ledgers run the statements built here (their
 * listing indexes: SQLite schema 8, PostgreSQL schema 3), so a page costs the same at 100,000 records as at 100.
 *
 * A record's status here is one word for what a person asks ("is it done?"): the server's status while the record is a
 * task, else what the client knows (`submitting`, `expired`, `unknown-outcome`); a call that ended without a task
 * (an immediate result or a JSON-RPC error) reads `completed` or `failed`.
 */
import type { TaskStatus } from '../../protocol/index.js';
import { TASK_STATUSES } from '../../protocol/status.js';
import {
  type CheckedListingQuery,
  listingLimit,
  listingPage,
  listingPosition,
  ListingQueryError,
  listingStatuses,
  listingText,
  prefixEnd,
} from '../../shared/listingPages.js';
import { sqlStatus } from '../../shared/statusSql.js';
import type { LocalState } from './localState.js';

export const RECORD_STATUSES = ['submitting', ...TASK_STATUSES, 'expired', 'unknown-outcome'] as const;

export type RecordStatus = (typeof RECORD_STATUSES)[number];

/** The record's status word (see the module comment). */
export function recordStatus(record: {
  localState: LocalState;
  status?: TaskStatus | undefined;
  error?: unknown;
}): RecordStatus {
  return statusOf(record.localState, record.status ?? null, record.error !== undefined);
}

function statusOf(localState: LocalState, status: TaskStatus | null, hasError: boolean): RecordStatus {
  switch (localState) {
    case 'submitting':
    case 'expired':
    case 'unknown-outcome':
      return localState;
    case 'tracking':
    case 'detached':
      return status ?? 'working';
    case 'terminal':
      return status ?? (hasError ? 'failed' : 'completed');
  }
}

/** Which records to list or count. Every filter given must hold (AND); none given: every record. */
export interface RecordListQuery {
  /** One status or several (any of them). */
  status?: RecordStatus | readonly RecordStatus[] | undefined;
  toolName?: string | undefined;
  /**
   * A record whose task id starts with this, or whose record id, correlation id or idempotency key is exactly this
   * (what people paste: an id, or a prefix of one, or their own business key).
   */
  search?: string | undefined;
  /** Records per page, 1 to 1000 (MAX_LISTING_LIMIT); default 50. Not used by `countRecords`. */
  limit?: number | undefined;
  /** `nextCursor` of the page before; absent for the first page. Not used by `countRecords`. */
  cursor?: string | undefined;
}

/** A record as listed: what a person scans a list for, without its arguments, result or inputs (`get` has those). */
export interface RecordSummary {
  recordId: string;
  taskId: string | undefined;
  endpoint: string;
  toolName: string;
  status: RecordStatus;
  localState: LocalState;
  statusMessage: string | undefined;
  correlationId: string | undefined;
  idempotencyKey: string | undefined;
  /** Local times (the ledger's clock). */
  submittedAt: number;
  updatedAt: number;
  cancelRequestedAt: number | undefined;
  supersededBy: string | undefined;
}

export interface RecordListPage {
  records: RecordSummary[];
  /** Pass as `cursor` for the next page; undefined on the last page. */
  nextCursor: string | undefined;
}

/** How many records match a query, per status (every status present, 0 when none). */
export type RecordCounts = Record<RecordStatus, number>;

/** A listing query the ledger refuses: says which field is wrong and why. Nothing was read. */
export class RecordListQueryError extends ListingQueryError {}

/** A query checked (`after`: a record's `submittedAt`, `recordId`). */
interface CheckedQuery extends CheckedListingQuery<RecordStatus> {
  toolName: string | undefined;
  search: string | undefined;
}

/** A filter's text; empty reads as none. */
function checkedText(field: string, value: unknown): string | undefined {
  const text = listingText(field, value, RecordListQueryError);
  return text === '' ? undefined : text;
}

/** Checks every field of a query; throws RecordListQueryError naming the first one that is wrong. */
export function checkRecordQuery(query: RecordListQuery): CheckedQuery {
  const limit = listingLimit(query.limit, RecordListQueryError);
  return {
    statuses: listingStatuses(query.status, RECORD_STATUSES, RecordListQueryError),
    toolName: checkedText('toolName', query.toolName),
    search: checkedText('search', query.search),
    limit,
    after: listingPosition(query.cursor, RecordListQueryError),
  };
}

/** What differs between the ledgers' SQL. */
export interface RecordListingDialect {
  table: string;
  placeholder: (n: number) => string;
  /** The task id as compared for a prefix: in code point order, on an index. */
  taskIdInCodePointOrder: string;
}

export interface RecordStatement {
  text: string;
  values: unknown[];
}

/**
 * One slice of the (local_state, status, submitted_at, record_id) index: a local state and one server status (NULL:
 * none seen), and for a terminal record without a status, whether it ended in an error.
 */
interface Branch {
  localState: LocalState;
  status: TaskStatus | null;
  error?: boolean;
}

const EVERY_STATUS: readonly (TaskStatus | null)[] = [null, ...TASK_STATUSES];

/** The index slices that hold the records of a status: each is read newest first on the index, then merged. */
function branchesOf(status: RecordStatus): Branch[] {
  const open: LocalState[] = ['tracking', 'detached'];
  switch (status) {
    case 'submitting':
    case 'expired':
    case 'unknown-outcome':
      return EVERY_STATUS.map((s) => ({ localState: status, status: s }));
    case 'working':
      return open.flatMap((localState) => [
        { localState, status: 'working' as const },
        { localState, status: null },
      ]);
    case 'input_required':
      return open.map((localState) => ({ localState, status }));
    case 'completed':
      return [
        { localState: 'terminal', status },
        { localState: 'terminal', status: null, error: false },
      ];
    case 'failed':
      return [
        { localState: 'terminal', status },
        { localState: 'terminal', status: null, error: true },
      ];
    case 'cancelled':
      return [{ localState: 'terminal', status }];
  }
}

/** A branch as SQL: literals only, so that each is a range of the index. */
function branchSql(branch: Branch): string {
  const status = branch.status === null ? 'status IS NULL' : `status = ${sqlStatus(branch.status)}`;
  const error = branch.error === undefined ? '' : branch.error ? ' AND error IS NOT NULL' : ' AND error IS NULL';
  return `local_state = '${branch.localState}' AND ${status}${error}`;
}

const SUMMARY_COLUMNS = `record_id, task_id, endpoint, tool_name, local_state, status, status_message, correlation_id,
  idempotency_key, submitted_at, updated_at, cancel_requested_at, superseded_by, error IS NOT NULL AS has_error`;

const NEWEST_FIRST = 'ORDER BY submitted_at DESC, record_id DESC';

function where(conditions: string[]): string {
  return conditions.length === 0 ? '' : `WHERE ${conditions.join(' AND ')}`;
}

/** The conditions of the tool, the search and the cursor, on `values` (appended to). */
function filterConditions(
  q: CheckedQuery,
  dialect: RecordListingDialect,
  values: unknown[],
  cursor: boolean,
): string[] {
  const value = (v: unknown) => {
    values.push(v);
    return dialect.placeholder(values.length);
  };
  const conditions: string[] = [];
  if (q.toolName !== undefined) conditions.push(`tool_name = ${value(q.toolName)}`);
  if (q.search !== undefined) {
    const end = prefixEnd(q.search);
    const task = `${dialect.taskIdInCodePointOrder} >= ${value(q.search)}${end === undefined ? '' : ` AND ${dialect.taskIdInCodePointOrder} < ${value(end)}`}`;
    const exact = value(q.search);
    conditions.push(`((${task}) OR record_id = ${exact} OR correlation_id = ${exact} OR idempotency_key = ${exact})`);
  }
  if (cursor && q.after !== undefined) {
    const [submittedAt, recordId] = q.after;
    conditions.push(`(submitted_at, record_id) < (${value(submittedAt)}, ${value(recordId)})`);
  }
  return conditions;
}

/**
 * One page, one row more than the limit. A tool or a search narrows on its own index and checks the statuses; else
 * without a status filter the (submitted_at, record_id) index is read newest first, and with one each slice of the
 * status index is read apart, at most a page of each, and merged.
 */
export function recordListStatement(
  query: RecordListQuery,
  dialect: RecordListingDialect,
): RecordStatement & { limit: number } {
  const q = checkRecordQuery(query);
  const values: unknown[] = [];
  const conditions = filterConditions(q, dialect, values, true);
  values.push(q.limit + 1);
  const limit = dialect.placeholder(values.length);
  const narrowed = q.toolName !== undefined || q.search !== undefined;
  if (q.statuses === undefined || narrowed) {
    if (q.statuses !== undefined) {
      conditions.push(`(${q.statuses.flatMap(branchesOf).map(branchSql).join(' OR ')})`);
    }
    return {
      text: `SELECT ${SUMMARY_COLUMNS} FROM ${dialect.table} ${where(conditions)} ${NEWEST_FIRST} LIMIT ${limit}`,
      values,
      limit: q.limit,
    };
  }
  const parts = q.statuses.flatMap(branchesOf).map(
    (branch, i) =>
      `SELECT * FROM (SELECT ${SUMMARY_COLUMNS} FROM ${dialect.table}
         ${where([branchSql(branch), ...conditions])} ${NEWEST_FIRST} LIMIT ${limit}) AS b${i}`,
  );
  return {
    text: `SELECT * FROM (${parts.join(' UNION ALL ')}) AS page ${NEWEST_FIRST} LIMIT ${limit}`,
    values,
    limit: q.limit,
  };
}

/**
 * The count of every status, for the tool and search given (the status filter is not applied: the counts say what
 * each status would show). Grouped on the status index; the terminal records without a status are split by whether
 * they ended in an error in a second, narrow count.
 */
export function recordCountStatement(query: RecordListQuery, dialect: RecordListingDialect): RecordStatement {
  const q = checkRecordQuery({ toolName: query.toolName, search: query.search });
  const values: unknown[] = [];
  const conditions = filterConditions(q, dialect, values, false);
  const errors = [...conditions, branchSql({ localState: 'terminal', status: null, error: true })];
  return {
    text: `SELECT local_state, status, COUNT(*) AS n, 0 AS errors FROM ${dialect.table} ${where(conditions)}
             GROUP BY local_state, status
           UNION ALL
           SELECT 'terminal' AS local_state, NULL AS status, 0 AS n, COUNT(*) AS errors FROM ${dialect.table}
             ${where(errors)}`,
    values,
  };
}

type Int = number | string;

export interface RecordSummaryRow {
  record_id: string;
  task_id: string | null;
  endpoint: string;
  tool_name: string;
  local_state: LocalState;
  status: TaskStatus | null;
  status_message: string | null;
  correlation_id: string | null;
  idempotency_key: string | null;
  submitted_at: Int;
  updated_at: Int;
  cancel_requested_at: Int | null;
  superseded_by: string | null;
  has_error: number | boolean;
}

function toSummary(row: RecordSummaryRow): RecordSummary {
  return {
    recordId: row.record_id,
    taskId: row.task_id ?? undefined,
    endpoint: row.endpoint,
    toolName: row.tool_name,
    status: statusOf(row.local_state, row.status, row.has_error === true || row.has_error === 1),
    localState: row.local_state,
    statusMessage: row.status_message ?? undefined,
    correlationId: row.correlation_id ?? undefined,
    idempotencyKey: row.idempotency_key ?? undefined,
    submittedAt: Number(row.submitted_at),
    updatedAt: Number(row.updated_at),
    cancelRequestedAt: row.cancel_requested_at === null ? undefined : Number(row.cancel_requested_at),
    supersededBy: row.superseded_by ?? undefined,
  };
}

/** The page the rows of `recordListStatement` make (at most one more than `limit`). */
export function toRecordPage(rows: RecordSummaryRow[], limit: number): RecordListPage {
  const page = listingPage(rows.map(toSummary), limit, (record) => [record.submittedAt, record.recordId]);
  return { records: page.items, nextCursor: page.nextCursor };
}

/** The counts the rows of `recordCountStatement` make, every status present. */
export function toRecordCounts(
  rows: Array<{ local_state: LocalState; status: TaskStatus | null; n: Int; errors: Int }>,
): RecordCounts {
  const counts = Object.fromEntries(RECORD_STATUSES.map((status) => [status, 0])) as RecordCounts;
  for (const row of rows) {
    const n = Number(row.n);
    const errors = Number(row.errors);
    if (n > 0) counts[statusOf(row.local_state, row.status, false)] += n;
    // the terminal records without a status that ended in an error: counted as completed above, they failed
    if (errors > 0) {
      counts.completed -= errors;
      counts.failed += errors;
    }
  }
  return counts;
}
