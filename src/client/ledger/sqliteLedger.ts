/**
 * The default Ledger: one SQLite file (better-sqlite3, WAL), owner-only; its schema is in sqlite/schema.ts, its
 * statements in sqlite/sql.ts. Each write is one savepoint of a group commit (`SqliteGroupCommit`: the writes
 * of one turn of the event loop, one transaction and one fsync), committed before its promise resolves. Schedule notes (`noteSchedule`) wait in
 * memory and ride along with the next transaction, or are committed together at most `deferMs` later: a client
 * polling thousands of tasks then commits once per batch of polls, not twice per poll.
 */
import { randomBytes } from 'node:crypto';

import type Database from 'better-sqlite3';

import type { InputRequest, InputResponse } from '../../protocol/index.js';
import { openSqliteFile } from '../../shared/sqlite/sqliteFile.js';
import { SqliteGroupCommit } from '../../shared/sqlite/sqliteGroupCommit.js';
import type { SqliteSynchronous } from '../../shared/sqlite/sqliteSynchronous.js';
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
import type { RecordCounts, RecordListPage, RecordListQuery, RecordSummaryRow } from './recordListing.js';
import { recordCountStatement, recordListStatement, toRecordCounts, toRecordPage } from './recordListing.js';
import type { HistoryLine, HistoryRow, InputRow, PendingNote, SubmissionRow as Row } from './records.js';
import {
  applyNote,
  localChangeLine,
  mergeNote,
  observedLine,
  toHistoryEntry,
  toInputAnswer,
  toRecord,
} from './records.js';
import { MIGRATIONS } from './sqlite/schema.js';
import { SQL, SQLITE_LISTING } from './sqlite/sql.js';

/** SQLite hands integer columns over as numbers. */
type SubmissionRow = Row<number> & {
  lease_until?: number | null;
  /** The record's schedule note (schema 7, RECORDS): NULL when it has none. */
  noted_poll_at?: number | null;
  noted_next_poll_at?: number | null;
  noted_age_ms?: number | null;
};

/** A statement's values as better-sqlite3 binds named parameters. */
function namedValues(values: unknown[]): Record<string, unknown> {
  return Object.fromEntries(values.map((value, i) => [`p${i + 1}`, value]));
}

/** Holder rows this long past their end are deleted: by then every record they covered has run out on its own. */
const FORGET_HOLDERS_AFTER_MS = 24 * 3_600_000;

export interface SqliteLedgerOptions {
  /** How long to wait for another process's write lock before failing. Default 5000 ms. */
  busyTimeoutMs?: number;
  /** Longest a schedule note waits in memory before it is committed. Default 1000 ms. */
  deferMs?: number;
  /**
   * `full` (default): a taskId, an answer and every other commit is on disk before the call that made it returns, so
   * a handle survives a power cut. `normal`: faster, safe against the process being killed, but the last commits
   * before a power cut or an OS crash may be lost. See `SqliteSynchronous`.
   */
  synchronous?: SqliteSynchronous;
}

export class SqliteLedger implements Ledger {
  readonly path: string;
  /** The file's path (Ledger.location). */
  readonly location: string;
  private readonly db: Database.Database;
  private readonly stmt;
  private readonly deferMs: number;
  /**
   * The writes of one turn, committed together (a submission burst's intents, sends and taskIds: one fsync for all
   * of them, not three each); each group first writes the pending schedule notes.
   */
  private readonly group: SqliteGroupCommit;
  /** A write of its own, now (a spelling adopted during a read, the deferred notes): also writes the pending notes. */
  private readonly writeTransaction: Database.Transaction<(work: () => unknown) => unknown>;
  private readonly pendingNotes = new Map<string, PendingNote>();
  /** endpointIdentity -> the spelling this ledger stores that server's rows under. */
  private readonly spellings = new Map<string, string>();
  private noteTimer: NodeJS.Timeout | undefined;

  constructor(path: string, options: SqliteLedgerOptions = {}) {
    this.path = path;
    this.location = path;
    this.db = openSqliteFile(path, { migrations: MIGRATIONS, what: 'ledger' }, options);
    this.deferMs = options.deferMs ?? 1000;
    const db = this.db;
    this.stmt = {
      insert: db.prepare(SQL.insert),
      supersede: db.prepare(SQL.supersede),
      get: db.prepare(SQL.get),
      byTaskId: db.prepare(SQL.byTaskId),
      byIdempotencyKey: db.prepare(SQL.byIdempotencyKey),
      list: db.prepare(SQL.list),
      holdsLease: db.prepare(SQL.holdsLease),
      markSent: db.prepare(SQL.markSent),
      commitTask: db.prepare(SQL.commitTask),
      observe: db.prepare(SQL.observe),
      recordPoll: db.prepare(SQL.recordPoll),
      applyNote: db.prepare(SQL.applyNote),
      recordError: db.prepare(SQL.recordError),
      close: db.prepare(SQL.close),
      closeArrived: db.prepare(SQL.closeArrived),
      endpointSpellings: db.prepare(SQL.endpointSpellings),
      adoptSpelling: db.prepare(SQL.adoptSpelling),
      reopen: db.prepare(SQL.reopen),
      secret: db.prepare(SQL.secret),
      insertSecret: db.prepare(SQL.insertSecret),
      abandonedSubmissions: db.prepare(SQL.abandonedSubmissions),
      settleAbandoned: db.prepare(SQL.settleAbandoned),
      detach: db.prepare(SQL.detach),
      cancelRequest: db.prepare(SQL.cancelRequest),
      claim: db.prepare(SQL.claim).pluck(),
      detachedAmong: db.prepare(SQL.detachedAmong),
      setHolder: db.prepare(SQL.setHolder),
      forgetHolders: db.prepare(SQL.forgetHolders),
      forgetHolder: db.prepare(SQL.forgetHolder),
      release: db.prepare(SQL.release),
      releaseAllOf: db.prepare(SQL.releaseAllOf),
      trackedBy: db.prepare(SQL.trackedBy),
      trackedAmong: db.prepare(SQL.trackedAmong).pluck(),
      appendHistory: db.prepare(SQL.appendHistory),
      history: db.prepare(SQL.history),
      inputs: db.prepare(SQL.inputs),
      inputsOf: db.prepare(SQL.inputsOf),
      input: db.prepare(SQL.input),
      insertInput: db.prepare(SQL.insertInput),
      markAsked: db.prepare(SQL.markAsked),
      storeAnswer: db.prepare(SQL.storeAnswer),
      markInputSent: db.prepare(SQL.markInputSent),
    };
    this.writeTransaction = db.transaction((work: () => unknown) => {
      this.writeNotes();
      return work();
    });
    this.group = new SqliteGroupCommit(db, () => this.writeNotes());
  }

  async recordIntent(submission: NewSubmission): Promise<RecordedIntent> {
    return this.group.run(() => this.insertIntent(submission));
  }

  async recordResubmission(previousRecordId: string, submission: NewSubmission): Promise<RecordedIntent> {
    return this.group.run((): RecordedIntent => {
      // supersede first so the new record may carry the same idempotency key
      if (this.stmt.supersede.run(submission.recordId, submission.submittedAt, previousRecordId).changes !== 1) {
        const previous = this.stmt.get.get(previousRecordId) as SubmissionRow | undefined;
        if (!previous) throw new Error(`no ledger record ${previousRecordId} to resubmit`);
        const refused = previous.superseded_by === null ? 'still-open' : 'already-resubmitted';
        const record = this.mustGet(previous.superseded_by ?? previous.record_id);
        return { created: false, record, refused };
      }
      return this.insertIntent(submission);
    });
  }

  private insertIntent(submission: NewSubmission): RecordedIntent {
    // inside the write transaction: two processes that reach a new server under two spellings make one spelling
    const endpoint = this.spelling(submission.endpoint);
    if (submission.idempotencyKey !== undefined) {
      const existing = this.stmt.byIdempotencyKey.get(endpoint, submission.idempotencyKey) as SubmissionRow | undefined;
      if (existing) return { created: false, record: this.toRecord(existing) };
    }
    this.stmt.insert.run({
      recordId: submission.recordId,
      endpoint,
      toolName: submission.toolName,
      arguments: JSON.stringify(submission.arguments),
      argumentsDigest: submission.argumentsDigest,
      correlationId: submission.correlationId ?? null,
      idempotencyKey: submission.idempotencyKey ?? null,
      wireIdempotencyKey: submission.wireIdempotencyKey ?? null,
      credential: submission.credential ?? null,
      submittedAt: submission.submittedAt,
      resubmittedFrom: submission.resubmittedFrom ?? null,
      leaseHolder: submission.leaseHolder,
      leaseExpiresAt: submission.leaseExpiresAt,
      traceContext: submission.traceContext ? JSON.stringify(submission.traceContext) : null,
    });
    this.stmt.setHolder.run(submission.leaseHolder, submission.leaseExpiresAt);
    this.appendHistory({
      recordId: submission.recordId,
      localState: 'submitting',
      observedAt: submission.submittedAt,
      note: submission.resubmittedFrom ? `resubmission of ${submission.resubmittedFrom}` : 'intent recorded',
    });
    return { created: true, record: this.mustGet(submission.recordId) };
  }

  async markSent(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.group.run(() => this.stmt.markSent.run({ recordId, holder, at }).changes === 1);
  }

  async commitTask(
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    leaseExpiresAt?: number,
  ): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before) return false;
      if (before.task_id === task.taskId) return true;
      const other = this.stmt.byTaskId.get(before.endpoint, task.taskId) as SubmissionRow | undefined;
      if (other) {
        // another record got the same task first (a resubmission that reused the idempotency key): say so here
        if (before.task_id === null) {
          this.appendLocalChange(before, before.local_state, at, taskHeldElsewhereNote(task.taskId, other.record_id));
        }
        return false;
      }
      const localState = this.applyTask(this.stmt.commitTask, recordId, holder, task, at, {
        leaseExpiresAt: leaseExpiresAt ?? null,
      });
      if (localState === undefined) return false;
      if (leaseExpiresAt !== undefined) this.stmt.setHolder.run(holder, leaseExpiresAt);
      const note = commitNote({ localState: before.local_state, terminalReason: before.terminal_reason });
      this.appendObserved(recordId, task, localState, at, note);
      return true;
    });
  }

  async recordObservation(recordId: string, holder: string, task: ObservedTask, at: number): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before) return false;
      const localState = this.applyTask(this.stmt.observe, recordId, holder, task, at);
      if (localState === undefined) return false;
      if (before.status !== task.status) this.appendObserved(recordId, task, localState, at);
      return true;
    });
  }

  async recordPoll(
    recordId: string,
    holder: string,
    at: number,
    lastError: RecordedError | undefined,
  ): Promise<boolean> {
    const params = { recordId, holder, at, lastError: lastError ? JSON.stringify(lastError) : null };
    return this.group.run(() => this.stmt.recordPoll.run(params).changes === 1);
  }

  noteSchedule(recordId: string, holder: string, note: ScheduleNote): void {
    const merged = mergeNote(this.pendingNotes.get(recordId), holder, note);
    this.pendingNotes.set(recordId, merged);
    if (this.noteTimer === undefined) {
      this.noteTimer = setTimeout(() => this.flushNotes(), this.deferMs);
      // pending bookkeeping must not keep a process alive; dispose() writes what is left
      this.noteTimer.unref();
    }
  }

  async recordError(recordId: string, lastError: RecordedError): Promise<void> {
    await this.group.run(() => {
      this.stmt.recordError.run(JSON.stringify(lastError), lastError.at, recordId);
      const note = errorNote(lastError);
      if (note === undefined) return;
      const row = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (row) this.appendLocalChange(row, row.local_state, lastError.at, note);
    });
  }

  async closeOut(recordId: string, holder: string, closing: Closing, at: number): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before) return false;
      const changed = (closing.arrived ? this.stmt.closeArrived : this.stmt.close).run({
        recordId,
        holder,
        at,
        localState: closing.localState,
        reason: closing.reason,
        result: closing.result ? JSON.stringify(closing.result) : null,
        error: closing.error ? JSON.stringify(closing.error) : null,
        lastError: closing.lastError ? JSON.stringify(closing.lastError) : null,
      }).changes;
      if (changed !== 1) return false;
      const note = closing.arrived
        ? answeredNote({ localState: before.local_state, terminalReason: before.terminal_reason }, closing.reason)
        : closing.reason;
      this.appendLocalChange(before, closing.localState, at, note);
      return true;
    });
  }

  async reopen(recordId: string, holder: string, leaseExpiresAt: number, at: number, note: string): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before || this.stmt.reopen.run({ recordId, holder, leaseExpiresAt, at }).changes !== 1) return false;
      this.stmt.setHolder.run(holder, leaseExpiresAt);
      this.appendLocalChange(before, 'tracking', at, note);
      return true;
    });
  }

  async secret(): Promise<Uint8Array> {
    const row = this.stmt.secret.get() as { secret: Buffer } | undefined;
    if (row) return row.secret;
    // the first process to need it writes it; a racing one's insert is ignored and both read the same secret
    await this.group.run(() => this.stmt.insertSecret.run(randomBytes(32)));
    return (this.stmt.secret.get() as { secret: Buffer }).secret;
  }

  async settleAbandonedSubmissions(endpoint: string, now: number, reason: string): Promise<TaskRecord[]> {
    return this.group.run((): TaskRecord[] => {
      const rows = this.stmt.abandonedSubmissions.all(this.spelling(endpoint), now) as SubmissionRow[];
      for (const row of rows) {
        const why = abandonedReason(reason, row.sent_at);
        this.stmt.settleAbandoned.run({ recordId: row.record_id, reason: why, at: now });
        this.appendHistory({ recordId: row.record_id, localState: 'unknown-outcome', observedAt: now, note: why });
      }
      return rows.map((row) => this.mustGet(row.record_id));
    });
  }

  async detach(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before || this.stmt.detach.run({ recordId, holder, at }).changes !== 1) return false;
      this.appendLocalChange(before, 'detached', at, 'detached by the application');
      return true;
    });
  }

  async recordCancelRequest(recordId: string, at: number): Promise<void> {
    await this.group.run(() => this.stmt.cancelRequest.run(at, at, recordId));
  }

  async claim(recordId: string, holder: string, leaseExpiresAt: number, now: number): Promise<boolean> {
    return (await this.claimAll([recordId], holder, leaseExpiresAt, now)).length > 0;
  }

  async claimAll(recordIds: readonly string[], holder: string, leaseExpiresAt: number, now: number): Promise<string[]> {
    if (recordIds.length === 0) return [];
    return this.group.run(() => {
      const ids = JSON.stringify(recordIds);
      // the whole row only of a record the claim attaches (its history line), read before the claim changes it
      const detached = this.stmt.detachedAmong.all(ids) as SubmissionRow[];
      const taken = new Set(this.stmt.claim.all({ recordIds: ids, holder, leaseExpiresAt, now }) as string[]);
      if (taken.size === 0) return [];
      // dated by the ledger's clock: `now` is the bound a lease lapsed before (1 for a client not yet at its server)
      const at = this.now();
      for (const before of detached) {
        if (taken.has(before.record_id)) this.appendLocalChange(before, 'tracking', at, 'attached');
      }
      // one write of the holder's row for all of them
      this.stmt.setHolder.run(holder, leaseExpiresAt);
      return recordIds.filter((recordId) => taken.has(recordId));
    });
  }

  async isTrackedBy(recordId: string, holder: string): Promise<boolean> {
    return this.stmt.trackedBy.get(recordId, holder) !== undefined;
  }

  async trackedAmong(recordIds: readonly string[], holder: string): Promise<ReadonlySet<string>> {
    return new Set(this.stmt.trackedAmong.all(JSON.stringify(recordIds), holder) as string[]);
  }

  async renewLeases(holder: string, leaseExpiresAt: number): Promise<void> {
    await this.group.run(() => {
      this.stmt.setHolder.run(holder, leaseExpiresAt);
      this.stmt.forgetHolders.run(leaseExpiresAt - FORGET_HOLDERS_AFTER_MS);
    });
  }

  async release(recordId: string, holder: string): Promise<void> {
    await this.group.run(() => this.stmt.release.run(recordId, holder));
  }

  async releaseAllOf(holder: string): Promise<number> {
    return this.group.run(() => {
      this.stmt.forgetHolder.run(holder);
      return this.stmt.releaseAllOf.run(holder).changes;
    });
  }

  async recordInputAsked(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    at: number,
  ): Promise<boolean> {
    return this.group.run((): boolean => {
      if (!this.stmt.holdsLease.get(recordId, holder)) return false;
      this.stmt.insertInput.run({
        recordId,
        key,
        request: JSON.stringify(request),
        askedAt: at,
        response: null,
        answeredAt: null,
      });
      this.stmt.markAsked.run(at, recordId, key);
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
    return this.group.run((): InputAnswer | undefined => {
      // a person's answer is kept whoever holds the lease now (docs/DESIGN.md rule 10): the holder sends stored answers
      if (!this.stmt.get.get(recordId)) return undefined;
      this.stmt.insertInput.run({
        recordId,
        key,
        request: JSON.stringify(request),
        askedAt: null,
        response: json,
        answeredAt: at,
      });
      this.stmt.storeAnswer.run(json, at, recordId, key);
      const row = this.stmt.input.get(recordId, key) as InputRow | undefined;
      return row ? toInputAnswer(row) : undefined;
    });
  }

  async recordInputsSent(recordId: string, keys: readonly string[], at: number): Promise<void> {
    await this.group.run(() => {
      for (const key of keys) this.stmt.markInputSent.run(at, recordId, key);
    });
  }

  async get(recordId: string): Promise<TaskRecord | undefined> {
    const row = this.stmt.get.get(recordId) as SubmissionRow | undefined;
    return row ? this.toRecord(row) : undefined;
  }

  async findByTaskId(endpoint: string, taskId: string): Promise<TaskRecord | undefined> {
    const row = this.stmt.byTaskId.get(this.spelling(endpoint), taskId) as SubmissionRow | undefined;
    return row ? this.toRecord(row) : undefined;
  }

  async findByIdempotencyKey(endpoint: string, idempotencyKey: string): Promise<TaskRecord | undefined> {
    const row = this.stmt.byIdempotencyKey.get(this.spelling(endpoint), idempotencyKey) as SubmissionRow | undefined;
    return row ? this.toRecord(row) : undefined;
  }

  async list(filter: LedgerFilter = {}): Promise<TaskRecord[]> {
    const rows = this.stmt.list.all({
      endpoint: filter.endpoint === undefined ? null : this.spelling(filter.endpoint),
      states: filter.localStates ? JSON.stringify(filter.localStates) : null,
      toolName: filter.toolName ?? null,
      correlationId: filter.correlationId ?? null,
      idempotencyKey: filter.idempotencyKey ?? null,
      since: filter.submittedSince ?? null,
      claimableAt: filter.claimableAt ?? null,
      limit: filter.limit ?? -1,
    }) as SubmissionRow[];
    // one query for the inputs of every row, not one per row: a resume lists thousands
    const inputs = new Map<string, InputAnswer[]>();
    if (rows.length > 0) {
      const ids = JSON.stringify(rows.map((row) => row.record_id));
      for (const input of this.stmt.inputsOf.all(ids) as (InputRow & { record_id: string })[]) {
        const list = inputs.get(input.record_id) ?? [];
        list.push(toInputAnswer(input));
        inputs.set(input.record_id, list);
      }
    }
    return rows.map((row) => this.toRecord(row, inputs.get(row.record_id) ?? []));
  }

  async history(recordId: string): Promise<HistoryEntry[]> {
    return (this.stmt.history.all(recordId) as HistoryRow[]).map(toHistoryEntry);
  }

  async listRecords(query: RecordListQuery = {}): Promise<RecordListPage> {
    const { text, values, limit } = recordListStatement(query, SQLITE_LISTING);
    return toRecordPage(this.db.prepare(text).all(namedValues(values)) as RecordSummaryRow[], limit);
  }

  async countRecords(query: RecordListQuery = {}): Promise<RecordCounts> {
    const { text, values } = recordCountStatement(query, SQLITE_LISTING);
    return toRecordCounts(this.db.prepare(text).all(namedValues(values)) as Parameters<typeof toRecordCounts>[0]);
  }

  /** One machine's ledger: its processes share the host's clock (Ledger.now). */
  now(): number {
    return Date.now();
  }

  async dispose(): Promise<void> {
    if (!this.db.open) return;
    // writes already asked for are committed (or failed) before the file closes, never dropped
    this.group.commit();
    this.flushNotes();
    this.db.close();
  }

  /**
   * The spelling this ledger stores the server `endpoint` names under: the first spelling of its
   * endpointIdentity ever stored. Rows under other spellings of it (an earlier build stored the URL as typed) are
   * moved to that one on first sight, except rows that would duplicate a task or a live key. A server not yet in the
   * ledger keeps the spelling given, which is a URL that reached it: the CLI connects to a record's endpoint.
   */
  private spelling(endpoint: string): string {
    const identity = endpointIdentity(endpoint);
    const known = this.spellings.get(identity);
    if (known !== undefined) return known;
    const stored = (this.stmt.endpointSpellings.all() as { endpoint: string }[])
      .map((row) => row.endpoint)
      .filter((spelling) => endpointIdentity(spelling) === identity);
    const [kept, ...others] = stored;
    if (kept === undefined) return endpoint;
    if (others.length > 0) {
      this.write(() => {
        for (const other of others) this.stmt.adoptSpelling.run({ kept, other });
      });
      // inside a write of a group the move commits with the group, or is undone with it: remembered once committed
      if (this.db.inTransaction) return kept;
    }
    this.spellings.set(identity, kept);
    return kept;
  }

  /** Run `work` in one IMMEDIATE transaction that also commits the pending schedule notes. */
  private write<T>(work: () => T): T {
    return this.writeTransaction.immediate(work) as T;
  }

  /** Commit the pending schedule notes now (a failure drops them: they are bookkeeping, see noteSchedule). */
  private flushNotes(): void {
    clearTimeout(this.noteTimer);
    this.noteTimer = undefined;
    if (this.pendingNotes.size === 0 || !this.db.open) return;
    try {
      this.write(() => undefined);
    } catch {
      this.pendingNotes.clear();
    }
  }

  /** Inside a write transaction: apply every pending note (a rolled-back transaction loses them). */
  private writeNotes(): void {
    if (this.pendingNotes.size === 0) return;
    for (const [recordId, note] of this.pendingNotes) {
      this.stmt.applyNote.run({
        recordId,
        holder: note.holder,
        polledAt: note.polledAt ?? null,
        setNext: note.nextPollAt === undefined ? 0 : 1,
        nextPollAt: note.nextPollAt ?? null,
        observedAgeMs: note.observedAgeMs ?? null,
      });
    }
    this.pendingNotes.clear();
    clearTimeout(this.noteTimer);
    this.noteTimer = undefined;
  }

  /** Write a task's state with `statement` (commitTask or observe); the new local state, or undefined if refused. */
  private applyTask(
    statement: Database.Statement,
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    extra: Record<string, unknown> = {},
  ): LocalState | undefined {
    const applied = applyObservedTask(task);
    const changed = statement.run({
      ...extra,
      recordId,
      holder,
      at,
      localState: applied.localState,
      taskId: task.taskId,
      status: task.status,
      statusMessage: task.statusMessage ?? null,
      createdAt: task.createdAt,
      lastUpdatedAt: task.lastUpdatedAt,
      ttlMs: task.ttlMs,
      pollIntervalMs: task.pollIntervalMs ?? null,
      result: applied.result ? JSON.stringify(applied.result) : null,
      error: applied.error ? JSON.stringify(applied.error) : null,
      terminalReason: applied.terminalReason ?? null,
      terminalAt: applied.terminalReason === undefined ? null : at,
    }).changes;
    return changed === 1 ? applied.localState : undefined;
  }

  /** A history line for a task state the server reported. */
  private appendObserved(
    recordId: string,
    task: ObservedTask,
    localState: LocalState,
    at: number,
    note?: string,
  ): void {
    this.appendHistory(observedLine(recordId, task, localState, at, note));
  }

  /** A history line for a change of the local state, with the task state the row last observed. */
  private appendLocalChange(before: SubmissionRow, localState: LocalState, observedAt: number, note: string): void {
    this.appendHistory(localChangeLine(before, localState, observedAt, note));
  }

  private appendHistory(entry: HistoryLine): void {
    this.stmt.appendHistory.run({
      recordId: entry.recordId,
      taskId: entry.taskId ?? null,
      status: entry.status ?? null,
      statusMessage: entry.statusMessage ?? null,
      localState: entry.localState,
      serverUpdatedAt: entry.serverUpdatedAt ?? null,
      observedAt: entry.observedAt,
      note: entry.note ?? null,
    });
  }

  private mustGet(recordId: string): TaskRecord {
    const row = this.stmt.get.get(recordId) as SubmissionRow | undefined;
    if (!row) throw new Error(`ledger record ${recordId} vanished inside its own transaction`);
    return this.toRecord(row);
  }

  private toRecord(
    row: SubmissionRow,
    inputs: InputAnswer[] = (this.stmt.inputs.all(row.record_id) as InputRow[]).map(toInputAnswer),
  ): TaskRecord {
    // the lease runs out when its holder's renewals say, not at the record's own claim (LEASE_UNTIL, sqlite/sql.ts)
    if (row.lease_until !== undefined) row.lease_expires_at = row.lease_until;
    foldScheduleNote(row);
    const record = toRecord(row, inputs);
    // what this object noted but has not committed yet, as the write will apply it
    applyNote(record, this.pendingNotes.get(row.record_id));
    return record;
  }
}

/**
 * A record's row with its schedule note (schema 7) folded in, as the note was written into the row itself before: the
 * later poll time (and `updated_at` no earlier than it), the longer observed age, and the next poll planned while the
 * record is tracked. The row's own columns count too: a build before schema 7 that still has the file open writes its
 * notes there.
 */
function foldScheduleNote(row: SubmissionRow): void {
  row.last_poll_at = later(row.last_poll_at, row.noted_poll_at);
  if (row.noted_poll_at != null) row.updated_at = Math.max(row.updated_at, row.noted_poll_at);
  row.observed_age_ms = later(row.observed_age_ms, row.noted_age_ms);
  if (row.local_state === 'tracking') row.next_poll_at = later(row.next_poll_at, row.noted_next_poll_at);
}

/** The larger of two optional numbers; null when neither is there. */
function later(a: number | null, b: number | null | undefined): number | null {
  if (b == null) return a;
  return a === null ? b : Math.max(a, b);
}
