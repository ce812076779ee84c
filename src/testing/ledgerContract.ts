/**
 * The one contract every Ledger passes, so that the ledgers cannot drift: SQLite and PostgreSQL here, and a ledger of
 * your own (docs/client.md, "A ledger of your own"), as taskStoreContract.ts is for the task stores. A ledger's test
 * file calls `describeLedgerContract` with a factory for a fresh, empty ledger. Times are fixed numbers passed in.
 *
 * Invariants: a record carries every field it was given; one current record per endpoint and idempotency key, also
 * when two ledger objects race for it; driving writes need the lease; concurrent claims split records, never share
 * them; the history is append-only, and holds each failed input handler; an input key keeps its first answer;
 * abandoned submissions surface as unknown-outcome, never as something to re-send.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { Ledger, NewSubmission, ObservedTask } from '../client/ledger/ledger.js';
import { argumentsDigest } from '../client/submitting/argumentsDigest.js';

/**
 * What a ledger's test file hands the contract, made afresh for every test by the factory given to
 * `describeLedgerContract` (in vitest's `beforeEach`).
 */
export interface LedgerFixture {
  /** A fresh, empty ledger: no record of an earlier test may be visible in it (a new file, a new schema or database). */
  ledger: Ledger;
  /**
   * Another ledger object on the same storage, as a second process would open it, with `deferMs` passed on to it when
   * given (how long it may hold schedule notes back). The races, fences and takeovers run between the two; the
   * contract disposes of each one it opened.
   */
  openSecond: (options?: { deferMs?: number }) => Promise<Ledger>;
  /**
   * Runs a statement on the storage itself, outside the ledger: the contract sends an `UPDATE` and a `DELETE` of
   * `historyTable` and expects both refused with an error that says "append-only".
   */
  execRaw: (sql: string) => Promise<void>;
  /** The table holding the status history, as `execRaw` names it. */
  historyTable: string;
  /** Disposes of what the factory made (disposes `ledger`, removes the file, drops the schema), after every test. */
  cleanup: () => Promise<void>;
}

const ENDPOINT = 'http://127.0.0.1:1/mcp';
const T0 = 1_700_000_000_000;

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
    leaseHolder: 'p1',
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

/**
 * Declares the contract's tests (a vitest `describe` named `Ledger contract: ${name}`) in the calling test file.
 * `makeFixture` runs before every test and must answer a fresh, empty ledger; the contract calls `cleanup` after it.
 */
export function describeLedgerContract(name: string, makeFixture: () => Promise<LedgerFixture>): void {
  describe(`Ledger contract: ${name}`, () => {
    let fixture: LedgerFixture;
    let ledger: Ledger;
    const others: Ledger[] = [];

    async function openSecond(options?: { deferMs?: number }): Promise<Ledger> {
      const other = await fixture.openSecond(options);
      others.push(other);
      return other;
    }

    beforeEach(async () => {
      fixture = await makeFixture();
      ledger = fixture.ledger;
    });

    afterEach(async () => {
      for (const other of others.splice(0)) await other.dispose();
      await fixture.cleanup();
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

    it('keeps the call’s trace context with the record, for whichever process follows it', async () => {
      // invariant: docs/operations.md, "Observability": a resumed record joins the trace of its call
      const traceContext = {
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        tracestate: 'vendor=x',
        baggage: 'tenant=acme',
      };
      await ledger.recordIntent(submission({ recordId: 'traced', traceContext }));
      await ledger.recordIntent(submission({ recordId: 'untraced' }));
      const other = await openSecond();
      expect((await other.get('traced'))?.traceContext).toEqual(traceContext);
      expect((await other.list()).find((r) => r.recordId === 'traced')?.traceContext).toEqual(traceContext);
      expect((await other.get('untraced'))?.traceContext).toBeUndefined();
    });

    it('treats spellings of one server as one endpoint for keys, tasks and lists', async () => {
      // invariant: one idempotency key makes one record whichever spelling of the URL is used
      await ledger.recordIntent(
        submission({ recordId: 'sp', idempotencyKey: 'k', endpoint: 'http://localhost:1/mcp/' }),
      );
      const again = await ledger.recordIntent(submission({ recordId: 'sp2', idempotencyKey: 'k' }));
      expect(again).toMatchObject({ created: false, record: { recordId: 'sp' } });
      await ledger.commitTask('sp', 'p1', task({ taskId: 't-sp' }), T0);
      expect((await ledger.findByTaskId(ENDPOINT, 't-sp'))?.recordId).toBe('sp');
      expect((await ledger.findByIdempotencyKey('http://[::1]:1/mcp', 'k'))?.recordId).toBe('sp');
      expect((await ledger.list({ endpoint: ENDPOINT })).map((r) => r.recordId)).toEqual(['sp']);
    });

    it('makes one record of one idempotency key when two ledger objects record it at the same moment', async () => {
      // invariant: exactly once fleet-wide: the storage decides the race, the loser gets the winner's record
      const other = await openSecond();
      for (let round = 0; round < 10; round++) {
        const key = `order-${round}`;
        const [a, b] = await Promise.all([
          ledger.recordIntent(submission({ recordId: `a-${round}`, idempotencyKey: key, leaseHolder: 'p1' })),
          other.recordIntent(submission({ recordId: `b-${round}`, idempotencyKey: key, leaseHolder: 'p2' })),
        ]);
        expect([a.created, b.created].sort()).toEqual([false, true]);
        expect(a.record.recordId).toBe(b.record.recordId);
      }
      expect(await ledger.list()).toHaveLength(10);
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

    it('closes a failed task out with its error as the reason, and keeps a bare terminal status tracked', async () => {
      // invariant: the client's closing rules (closing.ts) apply the same in every ledger
      await ledger.recordIntent(submission({ recordId: 'f' }));
      // a CreateTaskResult saying `completed` without the result: still tracked until tasks/get brings it
      await ledger.commitTask('f', 'p1', task({ status: 'completed' }), T0);
      expect(await ledger.get('f')).toMatchObject({ localState: 'tracking', terminalReason: undefined });
      const error = { code: -32603, message: 'boom' };
      await ledger.recordObservation('f', 'p1', task({ status: 'failed', error, result: { content: [] } }), T0 + 1);
      expect(await ledger.get('f')).toMatchObject({
        localState: 'terminal',
        error,
        result: undefined,
        terminalReason: 'task failed: -32603 boom',
        terminalAt: T0 + 1,
      });
    });

    it('keeps ttlMs null (unlimited) apart from "no task seen"', async () => {
      await ledger.recordIntent(submission({ recordId: 'u' }));
      expect((await ledger.get('u'))?.ttlMs).toBeUndefined();
      await ledger.commitTask('u', 'p1', task({ ttlMs: null }), T0);
      expect((await ledger.get('u'))?.ttlMs).toBeNull();
    });

    it('records a late tools/call answer on a settled record, and refuses a task another record holds', async () => {
      // invariant: docs/DESIGN.md rule 10: an answer that arrived is a fact, whoever holds the lease
      await ledger.recordIntent(submission({ recordId: 'late' }));
      await ledger.markSent('late', 'p1', T0 + 1);
      await ledger.settleAbandonedSubmissions(ENDPOINT, T0 + 60_000, 'found on resume');
      expect(await ledger.commitTask('late', 'p2', task({ taskId: 't-late' }), T0 + 60_001, T0 + 90_000)).toBe(true);
      expect(await ledger.get('late')).toMatchObject({
        localState: 'tracking',
        leaseHolder: 'p2',
        leaseExpiresAt: T0 + 90_000,
      });
      expect((await ledger.history('late')).at(-1)?.note).toMatch(/arrived after the record was settled/);
      await ledger.recordIntent(submission({ recordId: 'dup' }));
      expect(await ledger.commitTask('dup', 'p1', task({ taskId: 't-late' }), T0 + 2)).toBe(false);
      expect((await ledger.history('dup')).at(-1)?.note).toMatch(/which record late already follows/);
      expect(await ledger.commitTask('late', 'p2', task({ taskId: 't-late' }), T0 + 3)).toBe(true);
    });

    it('records an answer that ended a call without a task on a settled record, only when told it arrived', async () => {
      // invariant: docs/DESIGN.md rule 10, for an immediate result or a JSON-RPC error as for a taskId
      const answer = { localState: 'terminal', reason: 'immediate result', result: { content: [] } } as const;
      await ledger.recordIntent(submission({ recordId: 'imm' }));
      await ledger.markSent('imm', 'p1', T0 + 1);
      await ledger.settleAbandonedSubmissions(ENDPOINT, T0 + 60_000, 'found on resume');
      // a plain close-out is fenced by the lease the settling took away
      expect(await ledger.closeOut('imm', 'p1', answer, T0 + 60_001)).toBe(false);
      expect((await ledger.get('imm'))?.localState).toBe('unknown-outcome');
      expect(await ledger.closeOut('imm', 'p1', { ...answer, arrived: true }, T0 + 60_002)).toBe(true);
      expect(await ledger.get('imm')).toMatchObject({ localState: 'terminal', result: { content: [] } });
      expect((await ledger.history('imm')).at(-1)?.note).toMatch(
        /^immediate result; .*arrived after the record was settled/,
      );
      // once closed, nothing closes it again; nor a record that has a task
      expect(await ledger.closeOut('imm', 'p1', { ...answer, arrived: true }, T0 + 60_003)).toBe(false);
      await ledger.recordIntent(submission({ recordId: 'tasked' }));
      await ledger.commitTask('tasked', 'p1', task({ taskId: 't-tasked' }), T0 + 2);
      expect(await ledger.closeOut('tasked', 'p2', { ...answer, arrived: true }, T0 + 3)).toBe(false);
      expect((await ledger.get('tasked'))?.localState).toBe('tracking');
    });

    it('keeps each failed input handler as a history line; other errors only as the last error', async () => {
      await ledger.recordIntent(submission({ recordId: 'ih' }));
      await ledger.commitTask('ih', 'p1', task({ taskId: 't-ih', status: 'input_required' }), T0);
      const lines = (await ledger.history('ih')).length;
      // a failed poll recurs at every poll: it is the last error, not a step of the task
      await ledger.recordError('ih', { kind: 'transport', message: 'connection refused', at: T0 + 1 });
      const failed = (attempt: number) => `input go (elicitation/create): the handler failed (attempt ${attempt} of 3)`;
      await ledger.recordError('ih', { kind: 'input', message: failed(1), at: T0 + 2 });
      await ledger.recordError('ih', { kind: 'input', message: failed(2), at: T0 + 3 });
      const step = { recordId: 'ih', taskId: 't-ih', status: 'input_required', localState: 'tracking' };
      expect((await ledger.history('ih')).slice(lines)).toMatchObject([
        { ...step, observedAt: T0 + 2, note: failed(1) },
        { ...step, observedAt: T0 + 3, note: failed(2) },
      ]);
      expect((await ledger.get('ih'))?.lastError).toMatchObject({ kind: 'input', message: failed(2) });
      // a record that is gone gets neither
      await ledger.recordError('gone', { kind: 'input', message: failed(1), at: T0 + 4 });
      expect(await ledger.history('gone')).toEqual([]);
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
      await expect(fixture.execRaw(`UPDATE ${fixture.historyTable} SET status = 'completed'`)).rejects.toThrow(
        /append-only/,
      );
      await expect(fixture.execRaw(`DELETE FROM ${fixture.historyTable}`)).rejects.toThrow(/append-only/);
    });

    it('lets only the lease holder drive a record, and hands an expired lease over', async () => {
      await ledger.recordIntent(submission({ recordId: 'l' }));
      await ledger.commitTask('l', 'p1', task(), T0);
      const other = await openSecond();
      expect(await other.claim('l', 'p2', T0 + 60_000, T0 + 1_000)).toBe(false);
      expect(await other.recordObservation('l', 'p2', task({ status: 'failed' }), T0 + 1_000)).toBe(false);
      await other.renewLeases('p2', T0 + 99_999);
      expect((await ledger.get('l'))?.leaseHolder).toBe('p1');
      await ledger.renewLeases('p1', T0 + 40_000);
      expect((await ledger.get('l'))?.leaseExpiresAt).toBe(T0 + 40_000);
      expect(await other.claim('l', 'p2', T0 + 60_000, T0 + 39_999)).toBe(false);
      // p1 stopped renewing: its lease runs out and p2 takes over
      expect(await other.claim('l', 'p2', T0 + 100_000, T0 + 40_001)).toBe(true);
      expect((await ledger.get('l'))?.leaseHolder).toBe('p2');
    });

    it('refuses every driving write of a holder whose lease was taken over (the fence)', async () => {
      // invariant: a late write from a worker that lost its record is refused, whatever it tries
      await ledger.recordIntent(submission({ recordId: 'fence' }));
      await ledger.commitTask('fence', 'p1', task({ status: 'input_required' }), T0);
      const other = await openSecond();
      expect(await other.claim('fence', 'p2', T0 + 100_000, T0 + 40_001)).toBe(true);
      const request = { method: 'elicitation/create' as const, params: { message: 'name?' } };
      expect(await ledger.recordPoll('fence', 'p1', T0 + 40_002, undefined)).toBe(false);
      expect(await ledger.recordObservation('fence', 'p1', task({ status: 'cancelled' }), T0 + 40_002)).toBe(false);
      expect(await ledger.recordInputAsked('fence', 'p1', 'name', request, T0 + 40_002)).toBe(false);
      expect(await ledger.closeOut('fence', 'p1', { localState: 'expired', reason: 'late' }, T0 + 40_002)).toBe(false);
      expect(await ledger.detach('fence', 'p1', T0 + 40_002)).toBe(false);
      expect(await ledger.isTrackedBy('fence', 'p1')).toBe(false);
      await ledger.renewLeases('p1', T0 + 200_000);
      ledger.noteSchedule('fence', 'p1', { polledAt: T0 + 40_003, nextPollAt: T0 + 41_000 });
      await ledger.release('fence', 'p1');
      expect(await other.get('fence')).toMatchObject({
        localState: 'tracking',
        status: 'input_required',
        leaseHolder: 'p2',
        leaseExpiresAt: T0 + 100_000,
        inputs: [],
      });
      expect(await other.recordObservation('fence', 'p2', task({ status: 'working' }), T0 + 40_004)).toBe(true);
    });

    it('commits schedule notes with the next write or within deferMs, and shows them in this object at once', async () => {
      const noting = await openSecond({ deferMs: 200 });
      for (const recordId of ['n1', 'n2']) {
        await noting.recordIntent(submission({ recordId }));
        await noting.commitTask(recordId, 'p1', task({ taskId: `task-${recordId}` }), T0);
      }
      noting.noteSchedule('n1', 'p1', { polledAt: T0 + 10, nextPollAt: T0 + 500 });
      noting.noteSchedule('n1', 'p1', { polledAt: T0 + 5 }); // a late note never moves the poll time back
      noting.noteSchedule('n2', 'p2', { polledAt: T0 + 10, nextPollAt: T0 + 500 }); // p2 holds no lease on n2
      expect(await noting.get('n1')).toMatchObject({ lastPollAt: T0 + 10, nextPollAt: T0 + 500 });
      expect(await noting.get('n2')).toMatchObject({ lastPollAt: undefined, nextPollAt: undefined });
      // another object sees the committed state only
      expect(await ledger.get('n1')).toMatchObject({ lastPollAt: undefined, nextPollAt: undefined });
      // the next write of any record carries the notes along
      await noting.recordCancelRequest('n2', T0 + 20);
      expect(await ledger.get('n1')).toMatchObject({ lastPollAt: T0 + 10, nextPollAt: T0 + 500 });
      expect(await ledger.get('n2')).toMatchObject({ lastPollAt: undefined, cancelRequestedAt: T0 + 20 });
      // with no write, the timer commits them (bounded wait: the machine may be loaded)
      noting.noteSchedule('n2', 'p1', { nextPollAt: null, polledAt: T0 + 30 });
      expect((await ledger.get('n2'))?.lastPollAt).toBeUndefined();
      const deadline = Date.now() + 10_000;
      while ((await ledger.get('n2'))?.lastPollAt === undefined && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(await ledger.get('n2')).toMatchObject({ lastPollAt: T0 + 30, nextPollAt: undefined });
      // and dispose commits what is left
      noting.noteSchedule('n1', 'p1', { polledAt: T0 + 40, observedAgeMs: 1234 });
      await noting.dispose();
      expect(await ledger.get('n1')).toMatchObject({ lastPollAt: T0 + 40, observedAgeMs: 1234 });
    });

    it('claims many records in one call, skipping those another live owner holds', async () => {
      for (const recordId of ['c1', 'c2', 'c3', 'c4']) {
        await ledger.recordIntent(submission({ recordId }));
        await ledger.commitTask(recordId, 'p1', task({ taskId: `task-${recordId}` }), T0);
      }
      await ledger.detach('c1', 'p1', T0 + 1);
      await ledger.release('c3', 'p1');
      await ledger.closeOut('c4', 'p1', { localState: 'expired', reason: 'gone' }, T0 + 1);
      // c2 is still p1's (lease until T0 + 30 s); c1 is detached, c3 free, c4 closed out
      expect(await ledger.claimAll(['c3', 'c2', 'c4', 'c1', 'missing'], 'p2', T0 + 60_000, T0 + 2)).toEqual([
        'c3',
        'c1',
      ]);
      expect(await ledger.get('c1')).toMatchObject({ localState: 'tracking', leaseHolder: 'p2' });
      expect(await ledger.get('c4')).toMatchObject({ localState: 'expired' });
      expect((await ledger.history('c1')).at(-1)).toMatchObject({ localState: 'tracking', note: 'attached' });
      expect((await ledger.history('c3')).at(-1)?.note).not.toBe('attached');
      // a holder claiming what it holds keeps it, and writes no history line
      const c3Lines = (await ledger.history('c3')).length;
      expect(await ledger.claimAll(['c3'], 'p2', T0 + 70_000, T0 + 3)).toEqual(['c3']);
      expect(await ledger.history('c3')).toHaveLength(c3Lines);
      expect(await ledger.isTrackedBy('c1', 'p2')).toBe(true);
      expect(await ledger.isTrackedBy('c1', 'p1')).toBe(false);
      expect(await ledger.isTrackedBy('c2', 'p1')).toBe(true);
      // p1 died: everything it held is free at once
      expect(await ledger.releaseAllOf('p1')).toBe(1);
      expect(await ledger.isTrackedBy('c2', 'p1')).toBe(false);
      expect(await ledger.claimAll(['c2'], 'p2', T0 + 60_000, T0 + 3)).toEqual(['c2']);
    });

    it('reads the leases of many records at once: those the holder tracks, and no others', async () => {
      for (const recordId of ['t1', 't2', 't3', 't4']) {
        await ledger.recordIntent(submission({ recordId }));
        await ledger.commitTask(recordId, 'p1', task({ taskId: `task-${recordId}` }), T0);
      }
      await ledger.detach('t2', 'p1', T0 + 1);
      await ledger.release('t3', 'p1');
      expect(await ledger.claim('t3', 'p2', T0 + 60_000, T0 + 2)).toBe(true);
      await ledger.closeOut('t4', 'p1', { localState: 'expired', reason: 'gone' }, T0 + 3);
      const held = await ledger.trackedAmong(['t4', 't3', 't2', 't1', 'missing'], 'p1');
      expect([...held]).toEqual(['t1']);
      expect([...(await ledger.trackedAmong(['t1', 't3'], 'p2'))]).toEqual(['t3']);
      expect((await ledger.trackedAmong([], 'p1')).size).toBe(0);
    });

    it('splits records between ledger objects that claim them all at the same moment, each to one', async () => {
      // invariant: resumeAll() on every worker together follows (and so queries) each open record once
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) {
        const recordId = `s${i}`;
        ids.push(recordId);
        await ledger.recordIntent(submission({ recordId, leaseHolder: 'dead', leaseExpiresAt: T0 + 1 }));
        await ledger.commitTask(recordId, 'dead', task({ taskId: `task-${recordId}` }), T0, T0 + 1);
      }
      const claimers = [ledger, await openSecond(), await openSecond()];
      const claimed = await Promise.all(
        claimers.map((claimer, index) => claimer.claimAll(ids, `w${index}`, T0 + 90_000, T0 + 60_000)),
      );
      expect(claimed.flat().sort()).toEqual([...ids].sort());
      for (const [index, mine] of claimed.entries()) {
        for (const recordId of mine) expect((await ledger.get(recordId))?.leaseHolder).toBe(`w${index}`);
      }
    });

    it('settles abandoned submissions as unknown-outcome and says whether tools/call had left', async () => {
      await ledger.recordIntent(submission({ recordId: 'sent' }));
      await ledger.markSent('sent', 'p1', T0 + 1);
      await ledger.recordIntent(submission({ recordId: 'unsent' }));
      // another process's, sending now (a holder's leases end together, at its latest renewal or claim)
      await ledger.recordIntent(submission({ recordId: 'live', leaseHolder: 'p2', leaseExpiresAt: T0 + 999_999 }));
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
      expect(await ledger.recordInputAnswer('missing', 'p1', 'name', request, { action: 'accept' }, T0 + 5)).toBe(
        undefined,
      );
    });

    it('keeps the first of two answers stored at the same moment by two ledger objects', async () => {
      // invariant: an input key is answered once fleet-wide; both writers learn which answer won
      await ledger.recordIntent(submission({ recordId: 'race' }));
      await ledger.commitTask('race', 'p1', task({ status: 'input_required' }), T0);
      const other = await openSecond();
      const request = { method: 'elicitation/create' as const, params: { message: 'name?' } };
      const [a, b] = await Promise.all([
        ledger.recordInputAnswer('race', 'p1', 'name', request, { action: 'accept' }, T0 + 1),
        other.recordInputAnswer('race', 'p2', 'name', request, { action: 'decline' }, T0 + 1),
      ]);
      expect(a?.response).toEqual(b?.response);
      expect((await ledger.get('race'))?.inputs.map((input) => input.response)).toEqual([a?.response]);
    });

    it('records an explicit resubmission that supersedes the old record and may reuse its key', async () => {
      await ledger.recordIntent(submission({ recordId: 'old', idempotencyKey: 'k' }));
      await ledger.closeOut('old', 'p1', { localState: 'unknown-outcome', reason: 'no answer' }, T0 + 1);
      const next = await ledger.recordResubmission(
        'old',
        submission({ recordId: 'new', idempotencyKey: 'k', resubmittedFrom: 'old' }),
      );
      expect(next).toMatchObject({ created: true, record: { recordId: 'new', resubmittedFrom: 'old' } });
      expect((await ledger.get('old'))?.supersededBy).toBe('new');
      expect((await ledger.findByIdempotencyKey(ENDPOINT, 'k'))?.recordId).toBe('new');
      const again = await ledger.recordResubmission(
        'old',
        submission({ recordId: 'newer', idempotencyKey: 'k', resubmittedFrom: 'old' }),
      );
      expect(again).toMatchObject({ created: false, refused: 'already-resubmitted', record: { recordId: 'new' } });
      const open = await ledger.recordResubmission('new', submission({ recordId: 'x', resubmittedFrom: 'new' }));
      expect(open).toMatchObject({ created: false, refused: 'still-open', record: { recordId: 'new' } });
      await expect(ledger.recordResubmission('nope', submission({ recordId: 'y' }))).rejects.toThrow(/nope/);
    });

    it('detaches and re-attaches a tracked record', async () => {
      await ledger.recordIntent(submission({ recordId: 'd' }));
      await ledger.commitTask('d', 'p1', task(), T0);
      expect(await ledger.detach('d', 'p1', T0 + 1)).toBe(true);
      expect(await ledger.get('d')).toMatchObject({ localState: 'detached', leaseHolder: undefined });
      expect(await ledger.claim('d', 'p2', T0 + 60_000, T0 + 2)).toBe(true);
      expect(await ledger.get('d')).toMatchObject({ localState: 'tracking', leaseHolder: 'p2' });
      expect((await ledger.history('d')).map((entry) => entry.note ?? '')).toContain('attached');
    });

    it('dates the attached line by the ledger clock, not by the lapse bound a claim is given', async () => {
      // a client that has not reached its server yet claims with the bound 1 (no lease counts as lapsed): the line
      // that says the record is tracked again is still dated now (the console's timeline and `show` print it)
      await ledger.recordIntent(submission({ recordId: 'da' }));
      await ledger.commitTask('da', 'p1', task({ taskId: 'task-da' }), T0);
      expect(await ledger.detach('da', 'p1', T0 + 1)).toBe(true);
      const before = ledger.now();
      expect(await ledger.claimAll(['da'], 'p2', before + 60_000, 1)).toEqual(['da']);
      const attached = (await ledger.history('da')).at(-1);
      expect(attached).toMatchObject({ localState: 'tracking', note: 'attached' });
      expect(attached!.observedAt).toBeGreaterThanOrEqual(before);
      expect(attached!.observedAt).toBeLessThanOrEqual(ledger.now());
    });

    it('closes, expires and reopens a record, and records cancel requests and errors from any process', async () => {
      await ledger.recordIntent(submission({ recordId: 'e' }));
      await ledger.commitTask('e', 'p1', task({ taskId: 't-e' }), T0);
      await ledger.recordCancelRequest('e', T0 + 1);
      await ledger.recordCancelRequest('e', T0 + 2); // the first request is the one kept
      await ledger.recordError('e', { kind: 'input', message: 'no handler', at: T0 + 3 });
      expect(await ledger.closeOut('e', 'p1', { localState: 'expired', reason: 'ttl passed' }, T0 + 4)).toBe(true);
      expect(await ledger.get('e')).toMatchObject({
        localState: 'expired',
        terminalReason: 'ttl passed',
        terminalAt: T0 + 4,
        cancelRequestedAt: T0 + 1,
        lastError: { kind: 'input', message: 'no handler' },
        leaseHolder: undefined,
      });
      expect(await ledger.reopen('e', 'p2', T0 + 60_000, T0 + 5, 'checked again')).toBe(true);
      expect(await ledger.get('e')).toMatchObject({
        localState: 'tracking',
        terminalReason: undefined,
        leaseHolder: 'p2',
      });
      expect(await ledger.reopen('e', 'p2', T0 + 60_000, T0 + 6, 'again')).toBe(false);
      expect((await ledger.history('e')).at(-1)).toMatchObject({ localState: 'tracking', note: 'checked again' });
    });

    it('lists by state, endpoint, correlation id and tool', async () => {
      await ledger.recordIntent(submission({ recordId: 'x1', correlationId: 'a' }));
      await ledger.recordIntent(
        submission({ recordId: 'x2', correlationId: 'b', toolName: 'other', submittedAt: T0 + 1 }),
      );
      await ledger.commitTask('x2', 'p1', task({ taskId: 't2' }), T0);
      expect((await ledger.list({ localStates: ['tracking'] })).map((r) => r.recordId)).toEqual(['x2']);
      expect((await ledger.list({ correlationId: 'a' })).map((r) => r.recordId)).toEqual(['x1']);
      expect((await ledger.list({ toolName: 'other', endpoint: ENDPOINT })).map((r) => r.recordId)).toEqual(['x2']);
      expect((await ledger.list({ submittedSince: T0 + 1 })).map((r) => r.recordId)).toEqual(['x2']);
      expect((await ledger.list({ limit: 1 })).map((r) => r.recordId)).toEqual(['x1']);
      expect(await ledger.list({ endpoint: 'elsewhere' })).toEqual([]);
      expect((await ledger.findByTaskId(ENDPOINT, 't2'))?.recordId).toBe('x2');
    });

    it('lists the records a worker may take over: followable, with a lease free or run out', async () => {
      // invariant: a live worker finds a dead worker's records once their leases ran out, and no others
      for (const recordId of ['live', 'lapsed', 'free', 'done']) {
        await ledger.recordIntent(submission({ recordId, submittedAt: T0 + recordId.length }));
        await ledger.commitTask(recordId, 'p1', task({ taskId: `t-${recordId}` }), T0, T0 + 10_000);
      }
      await ledger.recordIntent(submission({ recordId: 'sending', leaseExpiresAt: T0 + 1 }));
      await ledger.renewLeases('p1', T0 + 10_000);
      await ledger.claim('live', 'p2', T0 + 90_000, T0 + 20_000);
      await ledger.release('free', 'p1');
      await ledger.closeOut('done', 'p1', { localState: 'expired', reason: 'gone' }, T0 + 1);
      const claimable = await ledger.list({ endpoint: ENDPOINT, claimableAt: T0 + 20_000 });
      expect(claimable.map((record) => record.recordId).sort()).toEqual(['free', 'lapsed']);
      expect(await ledger.list({ claimableAt: T0 + 5_000 })).toMatchObject([{ recordId: 'free' }]);
    });

    it('gives every object on the storage one clock, running on with real time', async () => {
      // invariant: the processes sharing a ledger stamp and compare leases on one clock (Ledger.now)
      const other = await openSecond();
      const [mine, theirs] = [ledger.now(), other.now()];
      // on this test's host every clock is right: the ledger's differs from it by a round trip at most
      expect(Math.abs(mine - Date.now())).toBeLessThan(2000);
      expect(Math.abs(theirs - mine)).toBeLessThan(2000);
      const before = ledger.now();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(ledger.now() - before).toBeGreaterThanOrEqual(45);
    });

    it('keeps one secret, the same for every object on the storage', async () => {
      const other = await openSecond();
      const [a, b] = await Promise.all([ledger.secret(), other.secret()]);
      expect(a.length).toBe(32);
      expect(Buffer.from(a).equals(Buffer.from(b))).toBe(true);
      expect(Buffer.from(await ledger.secret()).equals(Buffer.from(a))).toBe(true);
    });

    it('round-trips arguments and results that JSON types in databases refuse', async () => {
      // invariant: the ledger keeps what the application gave, exactly (a NUL character, a lone surrogate)
      const args = { text: 'a\u0000b', odd: '\ud800', nested: { n: 1.5, list: [true, null] } };
      await ledger.recordIntent(submission({ recordId: 'j', arguments: args, argumentsDigest: argumentsDigest(args) }));
      expect((await ledger.get('j'))?.arguments).toEqual(args);
    });
  });
}
