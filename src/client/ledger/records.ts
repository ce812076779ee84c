/**
 * What a ledger's rows mean, written once for every Ledger (SQLite and PostgreSQL): a submission row read back as a
 * `TaskRecord`, an input row as an `InputAnswer`, a history row as a `HistoryEntry`, and the deferred schedule notes
 * (`Ledger.noteSchedule`) as a read sees them before they are committed. Both ledgers name their columns alike; the
 * contract suite (src/testing/ledgerContract.ts) proves they read back alike.
 */
import type { InputRequest, InputResponse, JsonObject, JsonRpcError, TaskStatus } from '../../protocol/index.js';
import type { TraceCarrier } from '../../protocol/traceContext.js';
import type {
  HistoryEntry,
  InputAnswer,
  LocalState,
  ObservedTask,
  RecordedError,
  ScheduleNote,
  TaskRecord,
} from './ledger.js';

/** An integer column: SQLite hands it over as a number, PostgreSQL's BIGINT as a string. */
type Int = number | string;

/** A row of the submissions table, as both ledgers name its columns. */
export interface SubmissionRow<N extends Int = Int> {
  record_id: string;
  endpoint: string;
  tool_name: string;
  arguments: string;
  arguments_digest: string;
  correlation_id: string | null;
  idempotency_key: string | null;
  wire_idempotency_key: string | null;
  credential: string | null;
  task_id: string | null;
  local_state: LocalState;
  status: TaskStatus | null;
  status_message: string | null;
  created_at: string | null;
  last_updated_at: string | null;
  ttl_ms: N | null;
  poll_interval_ms: N | null;
  submitted_at: N;
  sent_at: N | null;
  last_poll_at: N | null;
  next_poll_at: N | null;
  last_error: string | null;
  result: string | null;
  error: string | null;
  terminal_reason: string | null;
  terminal_at: N | null;
  cancel_requested_at: N | null;
  resubmitted_from: string | null;
  superseded_by: string | null;
  /** The column keeps its first name (no migration for a word); the record says `leaseHolder`. */
  lease_owner: string | null;
  lease_expires_at: N | null;
  updated_at: N;
  observed_age_ms: N | null;
  /** JSON TraceCarrier; NULL on records without one (no SDK registered, or written before it was kept). */
  trace_context: string | null;
}

export interface InputRow {
  key: string;
  request: string;
  asked_at: Int | null;
  response: string | null;
  answered_at: Int | null;
  sent_at: Int | null;
}

export interface HistoryRow {
  seq: Int;
  record_id: string;
  task_id: string | null;
  status: TaskStatus | null;
  status_message: string | null;
  local_state: LocalState;
  server_updated_at: string | null;
  observed_at: Int;
  note: string | null;
}

/** A history line to append: what changed, and the task state the record holds with it. */
export interface HistoryLine {
  recordId: string;
  localState: LocalState;
  observedAt: number;
  taskId?: string | undefined;
  status?: TaskStatus | undefined;
  statusMessage?: string | undefined;
  serverUpdatedAt?: string | undefined;
  note?: string | undefined;
}

/** A schedule note waiting to be committed; `nextPollAt` undefined: not part of the note. */
export interface PendingNote {
  holder: string;
  polledAt: number | undefined;
  nextPollAt: number | null | undefined;
  observedAgeMs: number | undefined;
}

/**
 * The values most records share (the server, the tool, the holder, the credential's fingerprint, the states) as one
 * string each: a client following 10,000 tasks keeps a record per task, and each read of a row makes fresh strings.
 * Bounded: past 4,096 distinct values it starts over, and a record just keeps its own copy.
 */
const sharedValues = new Map<string, string>();
function shared<T extends string>(value: T): T;
function shared<T extends string>(value: T | null): T | undefined;
function shared<T extends string>(value: T | null): T | undefined {
  // a PostgreSQL row may leave an absent column undefined
  if (value === null || value === undefined) return undefined;
  const known = sharedValues.get(value);
  if (known !== undefined) return known as T;
  if (sharedValues.size >= 4096) sharedValues.clear();
  sharedValues.set(value, value);
  return value;
}

export function toRecord(row: SubmissionRow, inputs: InputAnswer[]): TaskRecord {
  return {
    recordId: row.record_id,
    endpoint: shared(row.endpoint),
    toolName: shared(row.tool_name),
    arguments: JSON.parse(row.arguments) as JsonObject,
    argumentsDigest: row.arguments_digest,
    correlationId: row.correlation_id ?? undefined,
    idempotencyKey: row.idempotency_key ?? undefined,
    wireIdempotencyKey: row.wire_idempotency_key ?? undefined,
    credential: shared(row.credential),
    taskId: row.task_id ?? undefined,
    localState: shared(row.local_state),
    status: shared(row.status),
    statusMessage: row.status_message ?? undefined,
    createdAt: row.created_at ?? undefined,
    lastUpdatedAt: row.last_updated_at ?? undefined,
    // NULL means "unlimited" only once a task was seen
    ttlMs: row.task_id === null ? undefined : (optionalNumber(row.ttl_ms) ?? null),
    pollIntervalMs: optionalNumber(row.poll_interval_ms),
    submittedAt: Number(row.submitted_at),
    sentAt: optionalNumber(row.sent_at),
    lastPollAt: optionalNumber(row.last_poll_at),
    nextPollAt: optionalNumber(row.next_poll_at),
    lastError: row.last_error ? (JSON.parse(row.last_error) as RecordedError) : undefined,
    result: row.result ? (JSON.parse(row.result) as JsonObject) : undefined,
    error: row.error ? (JSON.parse(row.error) as JsonRpcError) : undefined,
    terminalReason: row.terminal_reason ?? undefined,
    terminalAt: optionalNumber(row.terminal_at),
    cancelRequestedAt: optionalNumber(row.cancel_requested_at),
    resubmittedFrom: row.resubmitted_from ?? undefined,
    supersededBy: row.superseded_by ?? undefined,
    leaseHolder: shared(row.lease_owner),
    leaseExpiresAt: optionalNumber(row.lease_expires_at),
    updatedAt: Number(row.updated_at),
    observedAgeMs: optionalNumber(row.observed_age_ms),
    traceContext: row.trace_context ? (JSON.parse(row.trace_context) as TraceCarrier) : undefined,
    inputs,
  };
}

export function toInputAnswer(row: InputRow): InputAnswer {
  return {
    key: row.key,
    request: JSON.parse(row.request) as InputRequest,
    askedAt: optionalNumber(row.asked_at),
    response: row.response ? (JSON.parse(row.response) as InputResponse) : undefined,
    answeredAt: optionalNumber(row.answered_at),
    sentAt: optionalNumber(row.sent_at),
  };
}

export function toHistoryEntry(row: HistoryRow): HistoryEntry {
  return {
    seq: Number(row.seq),
    recordId: row.record_id,
    taskId: row.task_id ?? undefined,
    status: row.status ?? undefined,
    statusMessage: row.status_message ?? undefined,
    localState: row.local_state,
    serverUpdatedAt: row.server_updated_at ?? undefined,
    observedAt: Number(row.observed_at),
    note: row.note ?? undefined,
  };
}

/** The history line of a task state the server reported. */
export function observedLine(
  recordId: string,
  task: ObservedTask,
  localState: LocalState,
  at: number,
  note?: string,
): HistoryLine {
  return {
    recordId,
    taskId: task.taskId,
    status: task.status,
    statusMessage: task.statusMessage,
    localState,
    serverUpdatedAt: task.lastUpdatedAt,
    observedAt: at,
    note,
  };
}

/** The history line of a change of the local state, with the task state the row last observed. */
export function localChangeLine(
  before: SubmissionRow,
  localState: LocalState,
  observedAt: number,
  note: string,
): HistoryLine {
  return {
    recordId: before.record_id,
    taskId: before.task_id ?? undefined,
    status: before.status ?? undefined,
    statusMessage: before.status_message ?? undefined,
    localState,
    observedAt,
    note,
  };
}

/** `note` folded into what `holder` already noted for the record (a note of another holder is dropped). */
export function mergeNote(pending: PendingNote | undefined, holder: string, note: ScheduleNote): PendingNote {
  const merged: PendingNote =
    pending && pending.holder === holder
      ? pending
      : { holder, polledAt: undefined, nextPollAt: undefined, observedAgeMs: undefined };
  if (note.polledAt !== undefined) merged.polledAt = Math.max(merged.polledAt ?? note.polledAt, note.polledAt);
  if (note.nextPollAt !== undefined) merged.nextPollAt = note.nextPollAt;
  if (note.observedAgeMs !== undefined) {
    merged.observedAgeMs = Math.max(merged.observedAgeMs ?? note.observedAgeMs, note.observedAgeMs);
  }
  return merged;
}

/** A record read back with a note not committed yet, as the write will apply it; a note of another holder is not. */
export function applyNote(record: TaskRecord, note: PendingNote | undefined): void {
  if (!note || note.holder !== record.leaseHolder) return;
  if (note.polledAt !== undefined) {
    record.lastPollAt = Math.max(record.lastPollAt ?? note.polledAt, note.polledAt);
    record.updatedAt = Math.max(record.updatedAt, note.polledAt);
  }
  if (note.nextPollAt !== undefined && record.localState === 'tracking') {
    record.nextPollAt = note.nextPollAt ?? undefined;
  }
  if (note.observedAgeMs !== undefined) {
    record.observedAgeMs = Math.max(record.observedAgeMs ?? 0, note.observedAgeMs);
  }
}

export function optionalNumber(value: Int | null | undefined): number | undefined {
  return value === null || value === undefined ? undefined : Number(value);
}
