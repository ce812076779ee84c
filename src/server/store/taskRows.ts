/**
 * A `tasks` row as either store reads it, mapped to the store's types once for both dialects. PostgreSQL hands BIGINT
 * columns over as strings and booleans as booleans; SQLite hands over numbers, and 0/1 for booleans: the mapping takes
 * either. Two columns keep their first release's names: `owner` holds the caller's principal, `lease_owner` the lease
 * holder (an instance id); the code around them says principal and holder.
 */
import type { InputRequest, InputResponse, JsonObject, JsonRpcError, TaskStatus } from '../../protocol/index.js';
import type { TraceCarrier } from '../../protocol/traceContext.js';
import type { TaskSummary } from './listing/query.js';
import type { AwaitedInput, InputCapabilities, JsonValue, StoredInput, StoredStep, StoredTask } from './taskStore.js';

/** A whole number as a dialect returns it: a number (SQLite, JSON) or a BIGINT's decimal string (PostgreSQL). */
type Whole = number | string;
/** A boolean as a dialect returns it: a boolean (PostgreSQL) or 0/1 (SQLite). */
type Flag = boolean | number;

export interface TaskRowColumns {
  task_id: string;
  owner: string;
  tool_name: string;
  arguments: string;
  status: TaskStatus;
  status_message: string | null;
  created_at: Whole;
  last_updated_at: Whole;
  ttl_ms: Whole | null;
  poll_interval_ms: Whole;
  resumable: Flag;
  idempotency_key: string | null;
  result: string | null;
  error: string | null;
  cancel_requested: Flag;
  lease_owner: string | null;
  lease_expires_at: Whole | null;
  fence: number;
  attempt: number;
  input_capabilities: string | null;
  trace_context: string | null;
}

/** The columns the operators' listing reads (listing/query.ts): a task without its arguments, result or inputs. */
export type SummaryColumns = Pick<
  TaskRowColumns,
  | 'task_id'
  | 'owner'
  | 'tool_name'
  | 'status'
  | 'status_message'
  | 'created_at'
  | 'last_updated_at'
  | 'ttl_ms'
  | 'attempt'
  | 'cancel_requested'
  | 'lease_owner'
  | 'lease_expires_at'
>;

/** One input of a task, its times read by the dialect's store under these names. */
export interface InputColumns {
  key: string;
  request: string;
  response: string | null;
  requestedAt: Whole;
  answeredAt: Whole | null;
}

const flag = (value: Flag) => value === true || value === 1;

export function toStoredInput(input: InputColumns): StoredInput {
  return {
    key: input.key,
    request: JSON.parse(input.request) as InputRequest,
    response: input.response === null ? undefined : (JSON.parse(input.response) as InputResponse),
    requestedAt: Number(input.requestedAt),
    answeredAt: input.answeredAt === null ? undefined : Number(input.answeredAt),
  };
}

/** An answer given to an awaited input, as both stores read it (`TaskStore.answeredInputs`). */
export function toAnsweredInput(row: { task_id: string; key: string; response: string }): AwaitedInput & {
  response: InputResponse;
} {
  return { taskId: row.task_id, key: row.key, response: JSON.parse(row.response) as InputResponse };
}

/** The fields a listed task shows, mapped as a read maps them (`toStoredTask` starts from these). */
export function toTaskSummary(row: SummaryColumns): TaskSummary {
  return {
    taskId: row.task_id,
    principal: row.owner,
    toolName: row.tool_name,
    status: row.status,
    statusMessage: row.status_message ?? undefined,
    createdAt: Number(row.created_at),
    lastUpdatedAt: Number(row.last_updated_at),
    ttlMs: row.ttl_ms === null ? null : Number(row.ttl_ms),
    attempt: Number(row.attempt),
    cancelRequested: flag(row.cancel_requested),
    leaseHolder: row.lease_owner ?? undefined,
    leaseExpiresAt: row.lease_expires_at === null ? undefined : Number(row.lease_expires_at),
  };
}

export function toStoredTask(row: TaskRowColumns, inputs: readonly InputColumns[]): StoredTask {
  return {
    ...toTaskSummary(row),
    arguments: JSON.parse(row.arguments) as JsonObject,
    pollIntervalMs: Number(row.poll_interval_ms),
    resumable: flag(row.resumable),
    idempotencyKey: row.idempotency_key ?? undefined,
    result: row.result === null ? undefined : (JSON.parse(row.result) as JsonObject),
    error: row.error === null ? undefined : (JSON.parse(row.error) as JsonRpcError),
    fence: row.fence,
    inputs: inputs.map(toStoredInput),
    inputCapabilities:
      row.input_capabilities === null ? undefined : (JSON.parse(row.input_capabilities) as InputCapabilities),
    traceContext: row.trace_context === null ? undefined : (JSON.parse(row.trace_context) as TraceCarrier),
  };
}

/** A `steps` row. */
export function toStoredStep(row: { name: string; result: string | null; committed_at: Whole }): StoredStep {
  return {
    name: row.name,
    result: row.result === null ? undefined : (JSON.parse(row.result) as JsonValue),
    committedAt: Number(row.committed_at),
  };
}
