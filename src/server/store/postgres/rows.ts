/**
 * The rows of the PostgreSQL task store as the driver returns them, and their mapping to the store's types (one
 * mapping per dialect: the SQLite store has its own), and the NOTIFY payload of a signal.
 */

import type { InputRequest, InputResponse, JsonObject, JsonRpcError, TaskStatus } from '../../../protocol/index.js';
import type { TraceCarrier } from '../../../protocol/traceContext.js';
import type { InputCapabilities, JsonValue, StoredInput, StoredStep, StoredTask, TaskSignal } from '../taskStore.js';

/**
 * A row of `closeout_tasks`. Two columns keep their first release's names: `owner` holds the caller's principal,
 * `lease_owner` the lease holder (an instance id); the code around them says principal and holder.
 */
export interface TaskRow {
  task_id: string;
  owner: string;
  tool_name: string;
  arguments: string;
  status: TaskStatus;
  status_message: string | null;
  // BIGINT arrives as a string
  created_at: string;
  last_updated_at: string;
  ttl_ms: string | null;
  poll_interval_ms: string;
  resumable: boolean;
  idempotency_key: string | null;
  result: string | null;
  error: string | null;
  cancel_requested: boolean;
  lease_owner: string | null;
  lease_expires_at: string | null;
  fence: number;
  attempt: number;
  input_capabilities: string | null;
  trace_context: string | null;
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
  const inputs = (row.inputs ?? []).map((i): StoredInput => ({
    key: i.key,
    request: JSON.parse(i.request) as InputRequest,
    response: i.response === null ? undefined : (JSON.parse(i.response) as InputResponse),
    requestedAt: Number(i.requestedAt),
    answeredAt: i.answeredAt === null ? undefined : Number(i.answeredAt),
  }));
  return {
    taskId: row.task_id,
    principal: row.owner,
    toolName: row.tool_name,
    arguments: JSON.parse(row.arguments) as JsonObject,
    status: row.status,
    statusMessage: row.status_message ?? undefined,
    createdAt: Number(row.created_at),
    lastUpdatedAt: Number(row.last_updated_at),
    ttlMs: row.ttl_ms === null ? null : Number(row.ttl_ms),
    pollIntervalMs: Number(row.poll_interval_ms),
    resumable: row.resumable,
    idempotencyKey: row.idempotency_key ?? undefined,
    result: row.result === null ? undefined : (JSON.parse(row.result) as JsonObject),
    error: row.error === null ? undefined : (JSON.parse(row.error) as JsonRpcError),
    cancelRequested: row.cancel_requested,
    leaseHolder: row.lease_owner ?? undefined,
    leaseExpiresAt: row.lease_expires_at === null ? undefined : Number(row.lease_expires_at),
    fence: row.fence,
    attempt: row.attempt,
    inputs,
    inputCapabilities:
      row.input_capabilities === null ? undefined : (JSON.parse(row.input_capabilities) as InputCapabilities),
    traceContext: row.trace_context === null ? undefined : (JSON.parse(row.trace_context) as TraceCarrier),
  };
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
  return {
    name: row.name,
    result: row.result === null ? undefined : (JSON.parse(row.result) as JsonValue),
    committedAt: Number(row.committed_at),
  };
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
