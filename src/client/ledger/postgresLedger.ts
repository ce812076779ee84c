/**
 * The Ledger for client fleets: many worker processes on many machines sharing one PostgreSQL database
 * (docs/postgres.md). Its statements are in postgres/sql.ts, its schema in postgres/schema.ts; each write is one
 * transaction, committed before its promise resolves. The schema migrates itself, versioned, under an advisory lock, so workers starting together migrate once.
 *
 * Exactly once across the fleet rests on the database, never on a process's memory:
 * - one current record per server and idempotency key: a unique index decides two workers' race, the loser reads the
 *   winner's record and sends nothing (docs/REQUIREMENTS.md S16);
 * - a record is driven only by its lease holder, and every driving write checks the holder in the same statement (or
 *   under the row lock), so a worker whose lease was taken over has every late write refused: the lease holder id,
 *   unique per process start, is the fence;
 * - `claimAll` takes records `FOR UPDATE SKIP LOCKED`: workers resuming together split the open records, each record
 *   to one of them, which then queries it once;
 * - an input key is asked only under the lease, and answers are stored under the record's row lock: the first wins.
 * Liveness is the lease alone: a holder is alive while it renews (docs/DESIGN.md, rules learned in the field, 1).
 *
 * JSON values are TEXT written by `JSON.stringify`, as in the server's PostgreSQL store: exact round trips, including
 * strings PostgreSQL's json types refuse. Server endpoints are matched by `endpointIdentity`.
 */
import { randomBytes } from 'node:crypto';

import type pg from 'pg';

import type { InputRequest, InputResponse } from '../../protocol/index.js';
import { ConnectionGate } from '../../shared/postgres/connectionGate.js';
import { isPostgresUrl, passwordsOf, redactConnectionString } from '../../shared/postgres/connectionString.js';
import { DatabaseClock, renewedLeaseLength } from '../../shared/postgres/databaseClock.js';
import { loadPg } from '../../shared/postgres/driver.js';
import { wrapPostgresError } from '../../shared/postgres/errors.js';
import { runMigrations } from '../../shared/postgres/migrations.js';
import { connectionConfig, guardPool, statementTimeouts } from '../../shared/postgres/pool.js';
import { inTransaction } from '../../shared/postgres/transaction.js';
import {
  abandonedReason,
  answeredNote,
  applyObservedTask,
  commitNote,
  errorNote,
  taskHeldElsewhereNote,
} from './closing.js';
import { endpointIdentity } from './endpointIdentity.js';
import type {
  Closing,
  HistoryEntry,
  InputAnswer,
  Ledger,
  LedgerFilter,
  LocalState,
  NewSubmission,
  ObservedTask,
  RecordedError,
  RecordedIntent,
  ScheduleNote,
  TaskRecord,
} from './ledger.js';
import { type ClaimedRow, historyParams, type SubmissionRow, taskParams } from './postgres/rows.js';
import { PendingScheduleNotes } from './postgres/scheduleNotes.js';
import { MIGRATIONS } from './postgres/schema.js';
import { POSTGRES_LISTING, SQL } from './postgres/sql.js';
import type { RecordCounts, RecordListPage, RecordListQuery, RecordSummaryRow } from './recordListing.js';
import { recordCountStatement, recordListStatement, toRecordCounts, toRecordPage } from './recordListing.js';
import type { HistoryLine, HistoryRow, InputRow } from './records.js';
import { localChangeLine, observedLine, optionalNumber, toHistoryEntry, toInputAnswer, toRecord } from './records.js';

/** The ledger schema version this build writes. */
export const POSTGRES_LEDGER_SCHEMA_VERSION = MIGRATIONS.length;

export interface PostgresLedgerOptions {
  /**
   * Pooled connections (default 10: the scheduler's 8 polls in flight and room to spare), besides the one the lease
   * renewals have to themselves. More calls at once than this wait their turn in the process, however many.
   */
  maxConnections?: number;
  /**
   * How long making a connection may take before the call fails (a database that does not answer). Waiting for a
   * pooled connection that is busy does not count. Default 5000 ms.
   */
  connectionTimeoutMs?: number;
  /** How long one statement may take before it fails (server `statement_timeout`). Default 15000 ms. */
  statementTimeoutMs?: number;
  /** Longest a schedule note waits in memory before it is committed. Default 1000 ms. */
  deferMs?: number;
  /** Told about trouble the ledger handles on its own (an idle connection lost); the password is never in it. */
  onError?: (error: Error) => void;
}

export class PostgresLedger implements Ledger {
  /** Where the ledger lives, fit for display: the connection string without its password. */
  readonly location: string;
  private readonly pool: pg.Pool;
  private readonly gate: ConnectionGate;
  /**
   * One connection of its own for lease renewals: a renewal never waits behind the other calls, so a busy worker keeps
   * its leases (docs/DESIGN.md, "Rules learned in the field", 8, as the server's PostgreSQL store does).
   */
  private readonly leasePool: pg.Pool;
  private readonly passwords: string[];
  private readonly onError: (error: Error) => void;
  /** The schedule notes not committed yet (its own module: postgres/scheduleNotes.ts). */
  private readonly notes: PendingScheduleNotes;
  private disposed = false;
  /** The database's clock (`now`), read on the lease connection, as PostgresTaskStore.now on the server. */
  private readonly clock = new DatabaseClock(async () => {
    const { rows } = await this.guard('read the database clock', () =>
      this.leasePool.query<{ ms: number }>(SQL.databaseClock),
    );
    return Number(rows[0]!.ms);
  });

  private constructor(driver: typeof pg, connectionString: string, options: PostgresLedgerOptions) {
    this.location = redactConnectionString(connectionString);
    this.passwords = passwordsOf(connectionString);
    this.onError = options.onError ?? (() => {});
    this.notes = new PendingScheduleNotes({
      deferMs: options.deferMs ?? 1000,
      commit: (params) => this.transaction('notes', (client) => client.query(SQL.applyNotes, params)),
      onError: (error) => this.onError(error),
    });
    const maxConnections = options.maxConnections ?? 10;
    if (!Number.isInteger(maxConnections) || maxConnections < 1) {
      throw new RangeError(`PostgreSQL ledger: maxConnections must be a whole number >= 1, not ${maxConnections}`);
    }
    const config: pg.PoolConfig = { ...connectionConfig(connectionString, options), ...statementTimeouts(options) };
    this.pool = new driver.Pool({ ...config, max: maxConnections, application_name: 'closeout ledger' });
    this.gate = new ConnectionGate(maxConnections);
    this.leasePool = new driver.Pool({ ...config, max: 1, application_name: 'closeout ledger leases' });
    for (const pool of [this.pool, this.leasePool]) {
      guardPool(pool, (error) => this.onError(this.wrap('idle connection lost', error)));
    }
  }

  /** Connects and brings the schema to this build's version; safe when many workers start at once. */
  static async open(connectionString: string, options: PostgresLedgerOptions = {}): Promise<PostgresLedger> {
    if (!isPostgresUrl(connectionString)) {
      throw new Error(
        `PostgreSQL ledger: not a postgres:// connection string: ${redactConnectionString(connectionString)}`,
      );
    }
    // the driver is loaded here, not on import: a process on a SQLite ledger never pays for loading it
    const ledger = new PostgresLedger(loadPg(), connectionString, options);
    try {
      await ledger.migrate();
      await ledger.syncClock();
      return ledger;
    } catch (error) {
      await ledger.pool.end().catch(() => undefined);
      await ledger.leasePool.end().catch(() => undefined);
      throw error;
    }
  }

  private async migrate(): Promise<void> {
    await this.transaction('migrate', async (client) => {
      await runMigrations(client, { ...SQL, lock: SQL.migrationLock }, MIGRATIONS, 'ledger');
    });
  }

  async recordIntent(submission: NewSubmission): Promise<RecordedIntent> {
    return this.transaction('recordIntent', (client) => this.insertIntent(client, submission));
  }

  async recordResubmission(previousRecordId: string, submission: NewSubmission): Promise<RecordedIntent> {
    return this.transaction('recordResubmission', async (client): Promise<RecordedIntent> => {
      // supersede first so the new record may carry the same idempotency key
      const superseded = await client.query(SQL.supersede, [
        submission.recordId,
        submission.submittedAt,
        previousRecordId,
      ]);
      if (superseded.rowCount !== 1) {
        const previous = await this.read(client, SQL.get, [previousRecordId]);
        if (!previous) throw new Error(`no ledger record ${previousRecordId} to resubmit`);
        const refused = previous.supersededBy === undefined ? 'still-open' : 'already-resubmitted';
        const record = previous.supersededBy ? await this.read(client, SQL.get, [previous.supersededBy]) : previous;
        return { created: false, record: record ?? previous, refused };
      }
      return this.insertIntent(client, submission);
    });
  }

  private async insertIntent(client: pg.PoolClient, submission: NewSubmission): Promise<RecordedIntent> {
    const identity = endpointIdentity(submission.endpoint);
    const inserted = await client.query(SQL.insert, [
      submission.recordId,
      submission.endpoint,
      identity,
      submission.toolName,
      JSON.stringify(submission.arguments),
      submission.argumentsDigest,
      submission.correlationId ?? null,
      submission.idempotencyKey ?? null,
      submission.wireIdempotencyKey ?? null,
      submission.credential ?? null,
      submission.submittedAt,
      submission.resubmittedFrom ?? null,
      submission.leaseHolder,
      submission.leaseExpiresAt,
      submission.traceContext ? JSON.stringify(submission.traceContext) : null,
    ]);
    if (inserted.rowCount !== 1) {
      // the key is held: another worker's intent won the race (or was there before); theirs is the submission
      if (submission.idempotencyKey !== undefined) {
        const existing = await this.read(client, SQL.byIdempotencyKey, [identity, submission.idempotencyKey]);
        if (existing) return { created: false, record: existing };
      }
      throw new Error(`a ledger record ${submission.recordId} exists already`);
    }
    await this.appendHistory(client, {
      recordId: submission.recordId,
      localState: 'submitting',
      observedAt: submission.submittedAt,
      note: submission.resubmittedFrom ? `resubmission of ${submission.resubmittedFrom}` : 'intent recorded',
    });
    return { created: true, record: await this.mustRead(client, submission.recordId) };
  }

  async markSent(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.write(
      'markSent',
      async (client) => (await client.query(SQL.markSent, [recordId, holder, at])).rowCount === 1,
    );
  }

  async commitTask(
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    leaseExpiresAt?: number,
  ): Promise<boolean> {
    // two records committing one task at once: the unique index refuses the second, which then finds the other
    return this.retryOnUniqueViolation(() =>
      this.transaction('commitTask', async (client): Promise<boolean> => {
        const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
        if (!before) return false;
        if (before.task_id === task.taskId) return true;
        const other = await this.read(client, SQL.byTaskId, [endpointIdentity(before.endpoint), task.taskId]);
        if (other) {
          // another record got the same task first (a resubmission that reused the idempotency key): say so here
          if (before.task_id === null) {
            await this.appendLocalChange(
              client,
              before,
              before.local_state,
              at,
              taskHeldElsewhereNote(task.taskId, other.recordId),
            );
          }
          return false;
        }
        const applied = applyObservedTask(task);
        const changed = await client.query(SQL.commitTask, [
          recordId,
          holder,
          ...taskParams(task, applied, at),
          leaseExpiresAt ?? null,
          at,
        ]);
        if (changed.rowCount !== 1) return false;
        const note = commitNote({ localState: before.local_state, terminalReason: before.terminal_reason });
        await this.appendObserved(client, recordId, task, applied.localState, at, note);
        return true;
      }),
    );
  }

  async recordObservation(recordId: string, holder: string, task: ObservedTask, at: number): Promise<boolean> {
    return this.transaction('recordObservation', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before) return false;
      const applied = applyObservedTask(task);
      const changed = await client.query(SQL.observe, [recordId, holder, ...taskParams(task, applied, at), at]);
      if (changed.rowCount !== 1) return false;
      if (before.status !== task.status) await this.appendObserved(client, recordId, task, applied.localState, at);
      return true;
    });
  }

  async recordPoll(
    recordId: string,
    holder: string,
    at: number,
    lastError: RecordedError | undefined,
  ): Promise<boolean> {
    const params = [recordId, holder, at, lastError ? JSON.stringify(lastError) : null];
    return this.write('recordPoll', async (client) => (await client.query(SQL.recordPoll, params)).rowCount === 1);
  }

  noteSchedule(recordId: string, holder: string, note: ScheduleNote): void {
    this.notes.add(recordId, holder, note);
  }

  async recordError(recordId: string, lastError: RecordedError): Promise<void> {
    await this.write('recordError', async (client) => {
      await client.query(SQL.recordError, [recordId, JSON.stringify(lastError), lastError.at]);
      const note = errorNote(lastError);
      if (note === undefined) return;
      const row = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (row) await this.appendLocalChange(client, row, row.local_state, lastError.at, note);
    });
  }

  async closeOut(recordId: string, holder: string, closing: Closing, at: number): Promise<boolean> {
    return this.transaction('close', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before) return false;
      const changed = await client.query(closing.arrived ? SQL.closeArrived : SQL.close, [
        recordId,
        holder,
        closing.localState,
        closing.reason,
        at,
        closing.result ? JSON.stringify(closing.result) : null,
        closing.error ? JSON.stringify(closing.error) : null,
        closing.lastError ? JSON.stringify(closing.lastError) : null,
      ]);
      if (changed.rowCount !== 1) return false;
      const note = closing.arrived
        ? answeredNote({ localState: before.local_state, terminalReason: before.terminal_reason }, closing.reason)
        : closing.reason;
      await this.appendLocalChange(client, before, closing.localState, at, note);
      return true;
    });
  }

  async reopen(recordId: string, holder: string, leaseExpiresAt: number, at: number, note: string): Promise<boolean> {
    return this.transaction('reopen', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before) return false;
      if ((await client.query(SQL.reopen, [recordId, holder, leaseExpiresAt, at])).rowCount !== 1) return false;
      await this.appendLocalChange(client, before, 'tracking', at, note);
      return true;
    });
  }

  async settleAbandonedSubmissions(endpoint: string, now: number, reason: string): Promise<TaskRecord[]> {
    return this.transaction('settleAbandonedSubmissions', async (client): Promise<TaskRecord[]> => {
      const rows = (await client.query<SubmissionRow>(SQL.abandonedSubmissions, [endpointIdentity(endpoint), now]))
        .rows;
      const settled: TaskRecord[] = [];
      for (const row of rows) {
        const why = abandonedReason(reason, optionalNumber(row.sent_at));
        await client.query(SQL.settleAbandoned, [row.record_id, why, now]);
        await this.appendHistory(client, {
          recordId: row.record_id,
          localState: 'unknown-outcome',
          observedAt: now,
          note: why,
        });
        settled.push(await this.mustRead(client, row.record_id));
      }
      return settled;
    });
  }

  async detach(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.transaction('detach', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before || (await client.query(SQL.detach, [recordId, holder, at])).rowCount !== 1) return false;
      await this.appendLocalChange(client, before, 'detached', at, 'detached by the application');
      return true;
    });
  }

  async recordCancelRequest(recordId: string, at: number): Promise<void> {
    await this.write('recordCancelRequest', (client) => client.query(SQL.cancelRequest, [recordId, at]));
  }

  async claim(recordId: string, holder: string, leaseExpiresAt: number, now: number): Promise<boolean> {
    return this.transaction('claim', async (client) => {
      const { rows } = await client.query<ClaimedRow>(SQL.claimOne, [recordId, holder, leaseExpiresAt, now]);
      await this.noteAttached(client, rows);
      return rows.length === 1;
    });
  }

  async claimAll(recordIds: readonly string[], holder: string, leaseExpiresAt: number, now: number): Promise<string[]> {
    if (recordIds.length === 0) return [];
    return this.transaction('claimAll', async (client) => {
      const { rows } = await client.query<ClaimedRow>(SQL.claim, [[...recordIds], holder, leaseExpiresAt, now]);
      await this.noteAttached(client, rows);
      const claimed = new Set(rows.map((row) => row.record_id));
      return recordIds.filter((recordId) => claimed.has(recordId));
    });
  }

  /**
   * A history line for every claimed record that was detached: it is tracked again, dated by the ledger's clock (a
   * claim's `now` is the bound its lease lapsed before, 1 for a client that has not reached its server yet).
   */
  private async noteAttached(client: pg.PoolClient, rows: readonly ClaimedRow[]): Promise<void> {
    const at = this.now();
    for (const row of rows) {
      if (row.previous_state !== 'detached') continue;
      await this.appendHistory(client, {
        recordId: row.record_id,
        taskId: row.task_id ?? undefined,
        status: row.status ?? undefined,
        statusMessage: row.status_message ?? undefined,
        localState: 'tracking',
        observedAt: at,
        note: 'attached',
      });
    }
  }

  async isTrackedBy(recordId: string, holder: string): Promise<boolean> {
    return this.guard('isTrackedBy', async () => (await this.query(SQL.trackedBy, [recordId, holder])).rowCount === 1);
  }

  async trackedAmong(recordIds: readonly string[], holder: string): Promise<ReadonlySet<string>> {
    return this.guard('trackedAmong', async () => {
      const { rows } = await this.query<{ record_id: string }>(SQL.trackedAmong, [recordIds, holder]);
      return new Set(rows.map((row) => row.record_id));
    });
  }

  async renewLeases(holder: string, leaseExpiresAt: number): Promise<void> {
    // one statement on the lease connection: neither the pending schedule notes nor the other calls go first
    await this.guard('renewLeases', () =>
      this.leasePool.query(SQL.renewLeases, [
        holder,
        leaseExpiresAt,
        renewedLeaseLength(leaseExpiresAt, this.clock.now()),
      ]),
    );
  }

  async release(recordId: string, holder: string): Promise<void> {
    await this.write('release', (client) => client.query(SQL.release, [recordId, holder]));
  }

  async releaseAllOf(holder: string): Promise<number> {
    return this.write('releaseAllOf', async (client) => (await client.query(SQL.releaseAllOf, [holder])).rowCount ?? 0);
  }

  async recordInputAsked(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    at: number,
  ): Promise<boolean> {
    return this.transaction('recordInputAsked', async (client): Promise<boolean> => {
      // the lease is checked under the row lock, so no worker takes the record over between check and write
      if ((await client.query(SQL.lockHeld, [recordId, holder])).rowCount !== 1) return false;
      await client.query(SQL.insertInput, [recordId, key, JSON.stringify(request), at, null, null]);
      await client.query(SQL.markAsked, [recordId, key, at]);
      return true;
    });
  }

  async recordInputAnswer(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    response: InputResponse,
    at: number,
  ): Promise<InputAnswer | undefined> {
    const json = JSON.stringify(response);
    return this.transaction('recordInputAnswer', async (client): Promise<InputAnswer | undefined> => {
      // a person's answer is kept whoever holds the lease now (docs/DESIGN.md rule 10); the row lock orders two answers
      if ((await client.query(SQL.lockAny, [recordId])).rowCount !== 1) return undefined;
      await client.query(SQL.insertInput, [recordId, key, JSON.stringify(request), null, json, at]);
      await client.query(SQL.storeAnswer, [recordId, key, json, at]);
      const row = (await client.query<InputRow>(SQL.input, [recordId, key])).rows[0];
      return row ? toInputAnswer(row) : undefined;
    });
  }

  async recordInputsSent(recordId: string, keys: readonly string[], at: number): Promise<void> {
    await this.write('recordInputsSent', (client) => client.query(SQL.markInputsSent, [recordId, [...keys], at]));
  }

  async get(recordId: string): Promise<TaskRecord | undefined> {
    return this.guard('get', () => this.read(undefined, SQL.get, [recordId]));
  }

  async findByTaskId(endpoint: string, taskId: string): Promise<TaskRecord | undefined> {
    return this.guard('findByTaskId', () => this.read(undefined, SQL.byTaskId, [endpointIdentity(endpoint), taskId]));
  }

  async findByIdempotencyKey(endpoint: string, idempotencyKey: string): Promise<TaskRecord | undefined> {
    return this.guard('findByIdempotencyKey', () =>
      this.read(undefined, SQL.byIdempotencyKey, [endpointIdentity(endpoint), idempotencyKey]),
    );
  }

  async list(filter: LedgerFilter = {}): Promise<TaskRecord[]> {
    return this.guard('list', async () => {
      const { rows } = await this.query<SubmissionRow>(SQL.list, [
        filter.endpoint === undefined ? null : endpointIdentity(filter.endpoint),
        filter.localStates ? [...filter.localStates] : null,
        filter.toolName ?? null,
        filter.correlationId ?? null,
        filter.idempotencyKey ?? null,
        filter.submittedSince ?? null,
        filter.limit ?? null,
        filter.claimableAt ?? null,
      ]);
      return rows.map((row) => this.toRecord(row));
    });
  }

  async listRecords(query: RecordListQuery = {}): Promise<RecordListPage> {
    const { text, values, limit } = recordListStatement(query, POSTGRES_LISTING);
    return this.guard('listRecords', async () =>
      toRecordPage((await this.query<RecordSummaryRow>(text, values)).rows, limit),
    );
  }

  async countRecords(query: RecordListQuery = {}): Promise<RecordCounts> {
    const { text, values } = recordCountStatement(query, POSTGRES_LISTING);
    return this.guard('countRecords', async () =>
      toRecordCounts((await this.query<Parameters<typeof toRecordCounts>[0][number]>(text, values)).rows),
    );
  }

  async history(recordId: string): Promise<HistoryEntry[]> {
    return this.guard('history', async () => {
      const { rows } = await this.query<HistoryRow>(SQL.history, [recordId]);
      return rows.map(toHistoryEntry);
    });
  }

  async secret(): Promise<Uint8Array> {
    return this.guard('secret', async () => {
      const existing = (await this.query<{ secret: Buffer }>(SQL.secret)).rows[0];
      if (existing) return existing.secret;
      // the first worker to need it writes it; a racing one's insert does nothing and both read the same secret
      await this.query(SQL.insertSecret, [randomBytes(32)]);
      return (await this.query<{ secret: Buffer }>(SQL.secret)).rows[0]!.secret;
    });
  }

  /**
   * The database's time (Ledger.now): every worker of the fleet stamps and compares leases on it, whatever its host's
   * wall clock says (docs/DESIGN.md, "Rules learned in the field", 2). Off by at most half the round trip of the read
   * it was taken from, and by the monotonic clock's drift since (read again every minute).
   */
  now(): number {
    return this.clock.now();
  }

  /** Reads the database's clock, and from then on every minute (DatabaseClock.sync). */
  private async syncClock(): Promise<void> {
    await this.clock.sync();
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.clock.stop();
    await this.notes.close();
    await Promise.all([this.pool.end(), this.leasePool.end()]);
  }

  /** A write that is one statement: the pending schedule notes are committed first. */
  private async write<T>(op: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.transaction(op, fn);
  }

  /**
   * Runs `fn` in one transaction on one connection, after committing the pending schedule notes (they ride along
   * with the next write, as in the SQLite ledger). A deadlock the database broke is tried again, a few times.
   */
  private async transaction<T>(op: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    if (op !== 'migrate' && op !== 'notes') await this.notes.flush();
    return this.guard(op, async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await this.once(fn);
        } catch (error) {
          const code = (error as { code?: unknown }).code;
          if ((code === '40P01' || code === '40001') && attempt < 5) continue;
          throw error;
        }
      }
    });
  }

  private once<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.gate.run(() => inTransaction(this.pool, fn));
  }

  /** One statement outside a transaction, through the gate. */
  private query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    statement: string,
    params?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    return this.gate.run(() => this.pool.query<R>(statement, params));
  }

  private async retryOnUniqueViolation<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if ((error as { cause?: { code?: unknown } }).cause?.code !== '23505') throw error;
      return fn();
    }
  }

  /** One record: inside a transaction on its `client`, else through the gate. */
  private async read(
    client: pg.PoolClient | undefined,
    statement: string,
    params: unknown[],
  ): Promise<TaskRecord | undefined> {
    const result = client
      ? await client.query<SubmissionRow>(statement, params)
      : await this.query<SubmissionRow>(statement, params);
    const row = result.rows[0];
    return row ? this.toRecord(row) : undefined;
  }

  private async mustRead(client: pg.PoolClient, recordId: string): Promise<TaskRecord> {
    const record = await this.read(client, SQL.get, [recordId]);
    if (!record) throw new Error(`ledger record ${recordId} vanished inside its own transaction`);
    return record;
  }

  private async appendObserved(
    client: pg.PoolClient,
    recordId: string,
    task: ObservedTask,
    localState: LocalState,
    at: number,
    note?: string,
  ): Promise<void> {
    await this.appendHistory(client, observedLine(recordId, task, localState, at, note));
  }

  private async appendLocalChange(
    client: pg.PoolClient,
    before: SubmissionRow,
    localState: LocalState,
    observedAt: number,
    note: string,
  ): Promise<void> {
    await this.appendHistory(client, localChangeLine(before, localState, observedAt, note));
  }

  private async appendHistory(client: pg.PoolClient, entry: HistoryLine): Promise<void> {
    await client.query(SQL.appendHistory, historyParams(entry));
  }

  private toRecord(row: SubmissionRow): TaskRecord {
    const record = toRecord(row, (row.inputs ?? []).map(toInputAnswer));
    // what this object noted but has not committed yet, as the write will apply it
    this.notes.applyTo(record);
    return record;
  }

  /** Database trouble surfaces as an Error that says which ledger call failed, marked transient when it may pass. */
  private async guard<T>(op: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      throw this.wrap(op, error);
    }
  }

  private wrap(op: string, error: unknown): Error {
    return wrapPostgresError('PostgreSQL ledger', op, error, this.passwords);
  }
}
