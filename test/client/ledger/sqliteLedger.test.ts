// Invariants: the ledger file is owner-only and versioned; a record carries every field of issue 3; one current
// record per endpoint and idempotency key; driving writes need the lease; the history is append-only; an input key
// keeps its first answer; abandoned submissions surface as unknown-outcome, never as something to re-send.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { NewSubmission, ObservedTask } from '../../../src/client/index.js';
import { argumentsDigest, LEDGER_SCHEMA_VERSION, SqliteLedger } from '../../../src/client/index.js';

const ENDPOINT = 'http://127.0.0.1:1/mcp';
const T0 = 1_700_000_000_000;

let dir: string;
let path: string;
let ledger: SqliteLedger;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-ledger-'));
  path = join(dir, 'ledger.db');
  ledger = new SqliteLedger(path);
});

afterEach(async () => {
  await ledger.dispose();
  rmSync(dir, { recursive: true, force: true });
});

function submission(overrides: Partial<NewSubmission> = {}): NewSubmission {
  const args = { city: 'Oslo' };
  return {
    recordId: `r-${Math.random().toString(36).slice(2)}`,
    endpoint: ENDPOINT,
    toolName: 'forecast',
    arguments: args,
    argumentsDigest: argumentsDigest(args),
    correlationId: 'order-42',
    submittedAt: T0,
    leaseOwner: 'p1',
    leaseExpiresAt: T0 + 30_000,
    ...overrides,
  };
}

function task(overrides: Partial<ObservedTask> = {}): ObservedTask {
  return {
    taskId: 'task-1',
    status: 'working',
    statusMessage: 'started',
    createdAt: '2026-07-28T10:00:00.000Z',
    lastUpdatedAt: '2026-07-28T10:00:00.000Z',
    ttlMs: 60_000,
    pollIntervalMs: 500,
    ...overrides,
  };
}

describe('SqliteLedger', () => {
  it('creates the file owner-only and records its schema version', async () => {
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const raw = new Database(path, { readonly: true });
    expect(raw.pragma('user_version', { simple: true })).toBe(LEDGER_SCHEMA_VERSION);
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
    // reopening migrates nothing and keeps the data
    await ledger.recordIntent(submission({ recordId: 'keep' }));
    await ledger.dispose();
    ledger = new SqliteLedger(path);
    expect((await ledger.get('keep'))?.toolName).toBe('forecast');
  });

  it('refuses a ledger written by a newer schema', async () => {
    await ledger.dispose();
    const raw = new Database(path);
    raw.pragma(`user_version = ${LEDGER_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => new SqliteLedger(path)).toThrow(/newer than this build/);
    ledger = new SqliteLedger(join(dir, 'other.db'));
  });

  it('keeps one current record per endpoint and idempotency key', async () => {
    const first = await ledger.recordIntent(submission({ recordId: 'a', idempotencyKey: 'k1' }));
    expect(first.created).toBe(true);
    const again = await ledger.recordIntent(submission({ recordId: 'b', idempotencyKey: 'k1' }));
    expect(again).toMatchObject({ created: false, record: { recordId: 'a' } });
    const elsewhere = await ledger.recordIntent(submission({ recordId: 'c', idempotencyKey: 'k1', endpoint: 'x' }));
    expect(elsewhere.created).toBe(true);
    expect(await ledger.get('b')).toBeUndefined();
  });

  it('stores every field of a submission through its life', async () => {
    await ledger.recordIntent(submission({ recordId: 'r', idempotencyKey: 'k' }));
    expect(await ledger.markSent('r', 'p1', T0 + 1)).toBe(true);
    expect(await ledger.commitTask('r', 'p1', task(), T0 + 2)).toBe(true);
    expect(await ledger.recordPoll('r', 'p1', T0 + 3, { kind: 'transport', message: 'refused', at: T0 + 3 })).toBe(
      true,
    );
    ledger.noteSchedule('r', 'p1', { nextPollAt: T0 + 900 });
    expect((await ledger.get('r'))?.nextPollAt).toBe(T0 + 900);
    const result = { content: [{ type: 'text', text: 'sunny' }], isError: false };
    expect(
      await ledger.recordObservation(
        'r',
        'p1',
        task({ status: 'completed', statusMessage: 'done', lastUpdatedAt: '2026-07-28T10:01:00.000Z', result }),
        T0 + 4,
      ),
    ).toBe(true);
    const record = await ledger.get('r');
    expect(record).toMatchObject({
      recordId: 'r',
      endpoint: ENDPOINT,
      toolName: 'forecast',
      arguments: { city: 'Oslo' },
      argumentsDigest: argumentsDigest({ city: 'Oslo' }),
      correlationId: 'order-42',
      idempotencyKey: 'k',
      taskId: 'task-1',
      localState: 'terminal',
      status: 'completed',
      statusMessage: 'done',
      createdAt: '2026-07-28T10:00:00.000Z',
      lastUpdatedAt: '2026-07-28T10:01:00.000Z',
      ttlMs: 60_000,
      pollIntervalMs: 500,
      submittedAt: T0,
      sentAt: T0 + 1,
      lastPollAt: T0 + 3,
      nextPollAt: undefined, // terminal: nothing more to poll
      lastError: { kind: 'transport', message: 'refused' },
      result,
      terminalReason: 'task completed: done',
      terminalAt: T0 + 4,
    });
    const history = await ledger.history('r');
    expect(history.map((entry) => [entry.localState, entry.status ?? null])).toEqual([
      ['submitting', null],
      ['tracking', 'working'],
      ['terminal', 'completed'],
    ]);
  });

  it('keeps ttlMs null (unlimited) apart from "no task seen"', async () => {
    await ledger.recordIntent(submission({ recordId: 'u' }));
    expect((await ledger.get('u'))?.ttlMs).toBeUndefined();
    await ledger.commitTask('u', 'p1', task({ ttlMs: null }), T0);
    expect((await ledger.get('u'))?.ttlMs).toBeNull();
  });

  it('appends history only when the status changes, and never lets it be rewritten', async () => {
    await ledger.recordIntent(submission({ recordId: 'h' }));
    await ledger.commitTask('h', 'p1', task(), T0);
    await ledger.recordObservation('h', 'p1', task({ statusMessage: 'still' }), T0 + 1);
    await ledger.recordObservation('h', 'p1', task({ status: 'input_required' }), T0 + 2);
    await ledger.recordObservation('h', 'p1', task({ status: 'working' }), T0 + 3);
    expect((await ledger.history('h')).map((entry) => entry.status ?? null)).toEqual([
      null,
      'working',
      'input_required',
      'working',
    ]);
    const raw = new Database(path);
    expect(() => raw.prepare(`UPDATE status_history SET status = 'completed'`).run()).toThrow(/append-only/);
    expect(() => raw.prepare(`DELETE FROM status_history`).run()).toThrow(/append-only/);
    raw.close();
  });

  it('lets only the lease holder drive a record, and hands an expired lease over', async () => {
    await ledger.recordIntent(submission({ recordId: 'l' }));
    await ledger.commitTask('l', 'p1', task(), T0);
    const other = new SqliteLedger(path);
    try {
      expect(await other.claim('l', 'p2', T0 + 60_000, T0 + 1_000)).toBe(false);
      expect(await other.recordObservation('l', 'p2', task({ status: 'failed' }), T0 + 1_000)).toBe(false);
      expect(await other.renewLeases('p2', T0 + 99_999)).toBe(0);
      expect(await ledger.renewLeases('p1', T0 + 40_000)).toBe(1);
      expect(await other.claim('l', 'p2', T0 + 60_000, T0 + 39_999)).toBe(false);
      // p1 stopped renewing: its lease runs out and p2 takes over
      expect(await other.claim('l', 'p2', T0 + 100_000, T0 + 40_001)).toBe(true);
      expect(await ledger.recordPoll('l', 'p1', T0 + 40_002, undefined)).toBe(false);
      expect((await ledger.get('l'))?.leaseOwner).toBe('p2');
    } finally {
      await other.dispose();
    }
  });

  it('commits schedule notes with the next write or within deferMs, and shows them in this process at once', async () => {
    await ledger.dispose();
    ledger = new SqliteLedger(path, { deferMs: 200 });
    const other = new SqliteLedger(path);
    try {
      for (const recordId of ['n1', 'n2']) {
        await ledger.recordIntent(submission({ recordId }));
        await ledger.commitTask(recordId, 'p1', task({ taskId: `task-${recordId}` }), T0);
      }
      ledger.noteSchedule('n1', 'p1', { polledAt: T0 + 10, nextPollAt: T0 + 500 });
      ledger.noteSchedule('n1', 'p1', { polledAt: T0 + 5 }); // a late note never moves the poll time back
      ledger.noteSchedule('n2', 'p2', { polledAt: T0 + 10, nextPollAt: T0 + 500 }); // p2 holds no lease on n2
      expect(await ledger.get('n1')).toMatchObject({ lastPollAt: T0 + 10, nextPollAt: T0 + 500 });
      expect(await ledger.get('n2')).toMatchObject({ lastPollAt: undefined, nextPollAt: undefined });
      // another process sees the committed state only
      expect(await other.get('n1')).toMatchObject({ lastPollAt: undefined, nextPollAt: undefined });
      // the next write of any record carries the notes along
      await ledger.recordCancelRequest('n2', T0 + 20);
      expect(await other.get('n1')).toMatchObject({ lastPollAt: T0 + 10, nextPollAt: T0 + 500 });
      expect(await other.get('n2')).toMatchObject({ lastPollAt: undefined, cancelRequestedAt: T0 + 20 });
      // with no write, the timer commits them
      ledger.noteSchedule('n2', 'p1', { nextPollAt: null, polledAt: T0 + 30 });
      expect((await other.get('n2'))?.lastPollAt).toBeUndefined();
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(await other.get('n2')).toMatchObject({ lastPollAt: T0 + 30, nextPollAt: undefined });
      // and dispose commits what is left
      ledger.noteSchedule('n1', 'p1', { polledAt: T0 + 40 });
      await ledger.dispose();
      expect((await other.get('n1'))?.lastPollAt).toBe(T0 + 40);
    } finally {
      await other.dispose();
    }
  });

  it('claims many records in one call, skipping those another live owner holds', async () => {
    for (const recordId of ['c1', 'c2', 'c3']) {
      await ledger.recordIntent(submission({ recordId }));
      await ledger.commitTask(recordId, 'p1', task({ taskId: `task-${recordId}` }), T0);
    }
    await ledger.detach('c1', 'p1', T0 + 1);
    await ledger.release('c3', 'p1');
    // c2 is still p1's (lease until T0 + 30 s); c1 is detached, c3 free
    expect(await ledger.claimAll(['c3', 'c2', 'c1', 'missing'], 'p2', T0 + 60_000, T0 + 2)).toEqual(['c3', 'c1']);
    expect(await ledger.get('c1')).toMatchObject({ localState: 'tracking', leaseOwner: 'p2' });
    expect((await ledger.history('c1')).at(-1)).toMatchObject({ localState: 'tracking', note: 'attached' });
    expect(await ledger.isTrackedBy('c1', 'p2')).toBe(true);
    expect(await ledger.isTrackedBy('c1', 'p1')).toBe(false);
    expect(await ledger.isTrackedBy('c2', 'p1')).toBe(true);
    // p1 died: everything it held is free at once
    expect(await ledger.releaseAllOf('p1')).toBe(1);
    expect(await ledger.isTrackedBy('c2', 'p1')).toBe(false);
    expect(await ledger.claimAll(['c2'], 'p2', T0 + 60_000, T0 + 3)).toEqual(['c2']);
  });

  it('settles abandoned submissions as unknown-outcome and says whether tools/call had left', async () => {
    await ledger.recordIntent(submission({ recordId: 'sent' }));
    await ledger.markSent('sent', 'p1', T0 + 1);
    await ledger.recordIntent(submission({ recordId: 'unsent' }));
    await ledger.recordIntent(submission({ recordId: 'live', leaseExpiresAt: T0 + 999_999 }));
    const settled = await ledger.settleAbandonedSubmissions(ENDPOINT, T0 + 60_000, 'found on resume');
    expect(settled.map((record) => record.recordId).sort()).toEqual(['sent', 'unsent']);
    expect(await ledger.get('sent')).toMatchObject({
      localState: 'unknown-outcome',
      terminalReason: expect.stringMatching(/tools\/call was sent and no answer was recorded/),
    });
    expect((await ledger.get('unsent'))?.terminalReason).toMatch(/before tools\/call was sent/);
    expect((await ledger.get('live'))?.localState).toBe('submitting');
  });

  it('keeps the first answer of an input key and remembers it was asked and sent', async () => {
    await ledger.recordIntent(submission({ recordId: 'i' }));
    await ledger.commitTask('i', 'p1', task({ status: 'input_required' }), T0);
    const request = { method: 'elicitation/create' as const, params: { message: 'name?' } };
    expect(await ledger.recordInputAsked('i', 'p1', 'name', request, T0 + 1)).toBe(true);
    expect(await ledger.recordInputAsked('i', 'p2', 'name', request, T0 + 1)).toBe(false);
    const first = await ledger.recordInputAnswer('i', 'p1', 'name', request, { action: 'accept' }, T0 + 2);
    const second = await ledger.recordInputAnswer('i', 'p1', 'name', request, { action: 'decline' }, T0 + 3);
    expect(first?.response).toEqual({ action: 'accept' });
    expect(second?.response).toEqual({ action: 'accept' });
    await ledger.recordInputsSent('i', ['name'], T0 + 4);
    expect((await ledger.get('i'))?.inputs).toEqual([
      { key: 'name', request, askedAt: T0 + 1, response: { action: 'accept' }, answeredAt: T0 + 2, sentAt: T0 + 4 },
    ]);
  });

  it('records an explicit resubmission that supersedes the old record and may reuse its key', async () => {
    await ledger.recordIntent(submission({ recordId: 'old', idempotencyKey: 'k' }));
    await ledger.close('old', 'p1', { localState: 'unknown-outcome', reason: 'no answer' }, T0 + 1);
    const next = await ledger.recordResubmission(
      'old',
      submission({ recordId: 'new', idempotencyKey: 'k', resubmittedFrom: 'old' }),
    );
    expect(next).toMatchObject({ created: true, record: { recordId: 'new', resubmittedFrom: 'old' } });
    expect((await ledger.get('old'))?.supersededBy).toBe('new');
    expect((await ledger.findByIdempotencyKey(ENDPOINT, 'k'))?.recordId).toBe('new');
  });

  it('detaches and re-attaches a tracked record', async () => {
    await ledger.recordIntent(submission({ recordId: 'd' }));
    await ledger.commitTask('d', 'p1', task(), T0);
    expect(await ledger.detach('d', 'p1', T0 + 1)).toBe(true);
    expect(await ledger.get('d')).toMatchObject({ localState: 'detached', leaseOwner: undefined });
    expect(await ledger.claim('d', 'p2', T0 + 60_000, T0 + 2)).toBe(true);
    expect(await ledger.get('d')).toMatchObject({ localState: 'tracking', leaseOwner: 'p2' });
    expect((await ledger.history('d')).map((entry) => entry.note ?? '')).toContain('attached');
  });

  it('lists by state, endpoint, correlation id and tool', async () => {
    await ledger.recordIntent(submission({ recordId: 'x1', correlationId: 'a' }));
    await ledger.recordIntent(submission({ recordId: 'x2', correlationId: 'b', toolName: 'other' }));
    await ledger.commitTask('x2', 'p1', task({ taskId: 't2' }), T0);
    expect((await ledger.list({ localStates: ['tracking'] })).map((r) => r.recordId)).toEqual(['x2']);
    expect((await ledger.list({ correlationId: 'a' })).map((r) => r.recordId)).toEqual(['x1']);
    expect((await ledger.list({ toolName: 'other', endpoint: ENDPOINT })).map((r) => r.recordId)).toEqual(['x2']);
    expect(await ledger.list({ endpoint: 'elsewhere' })).toEqual([]);
    expect((await ledger.findByTaskId(ENDPOINT, 't2'))?.recordId).toBe('x2');
  });
});
