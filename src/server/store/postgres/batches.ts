/**
 * The PostgreSQL store's batcher: creates and finishes asked for in one turn of the event loop go out as one or two
 * statements, a batch too large is halved, and a failed group runs each write alone (`turnBatcher`, with its helpers).
 */
import DataLoader from 'dataloader';
import type pg from 'pg';

import { loadPg } from '../../../shared/postgres/driver.js';
import { asError } from '../../../shared/postgres/errors.js';
import type { LeaseRef, NewTask, StoredTask, TerminalOutcome } from '../taskStore.js';
import { insertedTask } from '../taskStore.js';
import { ARGUMENTS_PARAMETER } from './quotaShards.js';

/** SQLSTATE of a transaction PostgreSQL ended to break a deadlock. */
export const DEADLOCK_DETECTED = '40P01';

/** At most this many calls in one batch (sent as one statement or two, see PIPELINE_CALLS); more in a turn make more. */
export const MAX_BATCH = 256;

/**
 * A turn with at least this many calls of one kind sends them as two statements at once (`batches`), each of half
 * of them: fewer than 8 calls a statement and the second statement's fixed cost outweighs the overlap it buys
 * (bench/RESULTS.md, section 34).
 */
export const PIPELINE_CALLS = 16;

/**
 * At most about this many bytes of values in one batch statement. A statement carries each column as one array: 256
 * results of 4 MiB (the default maxResultBytes) are past what one JavaScript string holds (512 MiB), and the whole
 * batch would fail where each call alone succeeds. A call past it alone goes out alone.
 */
export const MAX_BATCH_BYTES = 16 * 1024 * 1024;

/** A create waiting for its batch: the task, the shard drawn for it, its principal's limits (null: none). */
export interface PendingCreate {
  task: NewTask;
  shard: number;
  open: number | null;
  stored: number | null;
  /** $1 to $18 of `SQL.createInShard`, one row of `SQL.createBatch`. */
  parameters: unknown[];
}

/** A finish waiting for its batch. */
export interface PendingFinish {
  lease: LeaseRef;
  /** $1 to $7 of `SQL.finish`, one row of `SQL.finishBatch`. */
  parameters: unknown[];
}

/**
 * A turn's calls as the statements they go out in: two halves from PIPELINE_CALLS calls on, else one, and one when two
 * calls name the same row (`rowsOf`).
 */
export function halves<K>(batch: readonly K[], rowsOf: (call: K) => readonly string[]): Array<readonly K[]> {
  if (batch.length < PIPELINE_CALLS) return [batch];
  const rows = new Set<string>();
  for (const call of batch) {
    for (const row of rowsOf(call)) {
      if (rows.has(row)) return [batch];
      rows.add(row);
    }
  }
  const half = Math.ceil(batch.length / 2);
  return [batch.slice(0, half), batch.slice(half)];
}

/** A batch cut, in order, into parts whose string values add up to at most MAX_BATCH_BYTES each (UTF-16 units). */
export function partsOfBytes<K extends { parameters: unknown[] }>(batch: readonly K[]): K[][] {
  const parts: K[][] = [];
  let part: K[] = [];
  let bytes = 0;
  for (const call of batch) {
    const size = call.parameters.reduce<number>((sum, v) => sum + (typeof v === 'string' ? v.length : 8), 0);
    if (part.length > 0 && bytes + size > MAX_BATCH_BYTES) {
      parts.push(part);
      part = [];
      bytes = 0;
    }
    part.push(call);
    bytes += size;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}

/**
 * Whether a batch statement's failure is one to answer by running each call alone: PostgreSQL refused it for a
 * value one call carried (SQLSTATE class 22, a data exception: a NUL character in a text, say), a constraint (23),
 * a limit one value is past (54: a principal too long for an index entry), or a conflict it broke by ending the
 * statement (40: a deadlock, a serialization failure). It changed nothing.
 */
export function ranAloneAfter(error: unknown): boolean {
  if (!(error instanceof loadPg().DatabaseError) || typeof error.code !== 'string') return false;
  return ['22', '23', '40', '54'].includes(error.code.slice(0, 2));
}

/** The calls of a batch whose key came first, and the indexes of those whose key an earlier call already had. */
export function splitRepeats<T>(batch: readonly T[], key: (call: T) => string): { firsts: T[]; repeats: Set<number> } {
  const seen = new Set<string>();
  const firsts: T[] = [];
  const repeats = new Set<number>();
  batch.forEach((call, i) => {
    const k = key(call);
    if (seen.has(k)) repeats.add(i);
    else {
      seen.add(k);
      firsts.push(call);
    }
  });
  return { firsts, repeats };
}

/** The fields of createBatch's records, in the order of `insertParameters`, then the shard, the limits and the
 * place in the batch. */
export const CREATE_FIELDS = [
  'task_id',
  'owner',
  'tool_name',
  'arguments',
  'status_message',
  'created_at',
  'ttl_ms',
  'expires_at',
  'poll_interval_ms',
  'resumable',
  'idempotency_key',
  'lease_owner',
  'lease_expires_at',
  'input_capabilities',
  'trace_context',
  'count_shard',
  'open_limit',
  'stored_limit',
  'n',
];

/** The fields of finishBatch's records, in the order of `finishParameters`. */
export const FINISH_FIELDS = [
  'new_status',
  'new_result',
  'new_error',
  'new_message',
  'finished_at',
  'id',
  'held_fence',
];

/**
 * Rows of parameters as one JSON array of records, for `json_to_recordset`: one parameter, whatever the batch. Each
 * record is built by a plain loop, half the CPU of `Object.fromEntries` over mapped pairs (every create and finish of a
 * batch goes through here).
 */
export function asJson(rows: unknown[][], fields: readonly string[]): string {
  return JSON.stringify(
    rows.map((row) => {
      const record: Record<string, unknown> = {};
      for (let i = 0; i < fields.length; i++) record[fields[i]!] = row[i];
      return record;
    }),
  );
}

/**
 * A statement each pooled connection parses and plans once (node-postgres prepares it by name on first use): for
 * the statements every create and finish sends. Their results name their columns, never \`*\`: a prepared statement
 * whose result gains a column (a newer release's migration) would fail.
 */
export function prepared(name: string, text: string, values: unknown[]): pg.QueryConfig {
  return { name: `closeout_${name}`, text, values };
}

/** The task a create inserted, from what it sent (its arguments as the JSON text it sent: `insertParameters`). */
export function createdTask({ task, parameters }: PendingCreate): StoredTask {
  return insertedTask(task, parameters[ARGUMENTS_PARAMETER] as string);
}

/** $1 to $15 of `SQL.insert` and `SQL.createInShard`: the new task's columns ($16 is the shard). */
export function finishParameters(lease: LeaseRef, outcome: TerminalOutcome, now: number): unknown[] {
  return [
    outcome.status,
    outcome.status === 'completed' ? JSON.stringify(outcome.result) : null,
    outcome.status === 'failed' ? JSON.stringify(outcome.error) : null,
    outcome.statusMessage ?? null,
    now,
    lease.taskId,
    lease.fence,
  ];
}

export function insertParameters(task: NewTask): unknown[] {
  return [
    task.taskId,
    task.principal,
    task.toolName,
    JSON.stringify(task.arguments),
    task.statusMessage ?? null,
    task.createdAt,
    task.ttlMs,
    task.ttlMs === null ? null : task.createdAt + task.ttlMs,
    task.pollIntervalMs,
    task.resumable,
    task.idempotencyKey ?? null,
    task.leaseHolder,
    task.leaseExpiresAt,
    task.inputCapabilities === undefined ? null : JSON.stringify(task.inputCapabilities),
    task.traceContext === undefined ? null : JSON.stringify(task.traceContext),
  ];
}

/**
 * Calls of one kind made in one turn of the event loop, sent as one statement: one round trip and one commit for
 * them all, each answered when that commit is. A turn of PIPELINE_CALLS calls or more goes out as two statements at
 * once, each answering its own callers when it commits: while the database runs one, this process answers the
 * other's callers and sends what they ask next, where one statement would leave one of the two idle (bench/RESULTS.md,
 * section 34); a turn asking for one row twice (`rowsOf`: a task id, an idempotency key) stays one statement, which
 * runs the later twin alone after it, where two at once would have one wait for the other's commit. A statement
 * PostgreSQL refuses changes nothing (it is its own transaction); refused for what one call carried or for a
 * conflict between them (`ranAloneAfter`), each call is then run alone and fails alone, while any other failure
 * (the database unreachable, a timeout) fails the calls of that statement, as it would have failed each alone.
 */
export function turnBatcher<K extends { parameters: unknown[] }, V>(
  run: (batch: readonly K[]) => Promise<Array<V | Error>>,
  rowsOf: (call: K) => readonly string[],
): { load: (call: K) => Promise<V> } {
  // calls whose values add up to more than MAX_BATCH_BYTES go out as several statements, one after the other
  const inOrder = async (calls: readonly K[]) => {
    const answers: Array<V | Error> = [];
    for (const part of partsOfBytes(calls)) {
      answers.push(...(await run(part).catch((error: unknown) => part.map(() => asError(error)))));
    }
    return answers;
  };
  // each call's value is the promise of its own answer, which its `load` adopts: a half answers its callers when its
  // statement commits, whatever the other half is doing
  const loader = new DataLoader<K, Promise<V>>(
    async (batch) =>
      halves(batch, rowsOf).flatMap((calls) => {
        const answers = inOrder(calls);
        return calls.map((_, i) => {
          const answer = answers.then((all) => (all[i] instanceof Error ? Promise.reject(all[i]) : (all[i] as V)));
          // adopted by the call's `load` a few microtasks later: not an unhandled rejection meanwhile
          answer.catch(() => {});
          return answer;
        });
      }),
    { cache: false, maxBatchSize: MAX_BATCH, batchScheduleFn: (send) => setImmediate(send) },
  );
  return { load: async (call) => await loader.load(call) };
}
