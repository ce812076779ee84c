/**
 * The task-store contract's cases of a task's status message and its one terminal write.
 */
import { beforeEach, describe, expect, it } from 'vitest';

import type { TaskStore } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { accept, elicit, leaseOf, MINUTE, T0 } from './storeUnderTest.js';

/** The lease holder's status message: stored with lastUpdatedAt, the status left alone. */
export function describeStatusMessages(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('status messages', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('stores a status message from the lease holder and leaves the status alone', async () => {
      // invariant: setStatusMessage with the current fence updates statusMessage and lastUpdatedAt only
      const task = await created();
      expect(await store.setStatusMessage(leaseOf(task), 'step 1 of 3', T0 + 5)).toBe(true);
      const stored = await read(task.taskId);
      expect(stored).toEqual({ ...task, statusMessage: 'step 1 of 3', lastUpdatedAt: T0 + 5 });
    });

    it('refuses a status message for an unknown task', async () => {
      // invariant: no write ever creates a row
      expect(await store.setStatusMessage({ taskId: 'task-unknown', fence: 1 }, 'hi', T0)).toBe(false);
      expect(await store.get('task-unknown')).toBeUndefined();
    });
  });
}

/** The one terminal write: it stores the outcome, ends the lease, and nothing changes the task again. */
export function describeTerminalImmutability(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('terminal immutability', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('records completed with its result, releases the lease and keeps the message when none is given', async () => {
      // invariant: the one terminal write stores the outcome and ends the lease
      const task = await created({ statusMessage: 'working on it' });
      const result = { content: [{ type: 'text', text: 'done' }], isError: false };
      expect(await store.finish(leaseOf(task), { status: 'completed', result }, T0 + 10)).toBe(true);
      const stored = await read(task.taskId);
      expect(stored).toMatchObject({
        status: 'completed',
        result,
        statusMessage: 'working on it',
        lastUpdatedAt: T0 + 10,
      });
      expect(stored.error).toBeUndefined();
      expect(stored.leaseHolder).toBeUndefined();
      expect(stored.leaseExpiresAt).toBeUndefined();
    });

    it('records failed with its JSON-RPC error and cancelled with its message', async () => {
      // invariant: failed carries the error object as given; cancelled carries neither result nor error
      const a = await created();
      const error = { code: -32603, message: 'handler crashed', data: { where: 'step 2' } };
      expect(await store.finish(leaseOf(a), { status: 'failed', error, statusMessage: 'crashed' }, T0 + 1)).toBe(true);
      expect(await read(a.taskId)).toMatchObject({ status: 'failed', error, statusMessage: 'crashed' });
      expect((await read(a.taskId)).result).toBeUndefined();

      const b = await created();
      expect(
        await store.finish(leaseOf(b), { status: 'cancelled', statusMessage: 'cancelled by client' }, T0 + 2),
      ).toBe(true);
      const cancelled = await read(b.taskId);
      expect(cancelled).toMatchObject({ status: 'cancelled', statusMessage: 'cancelled by client' });
      expect(cancelled.result).toBeUndefined();
      expect(cancelled.error).toBeUndefined();
    });

    it('refuses a second terminal write and changes nothing', async () => {
      // invariant: exactly one terminal write wins; a terminal task never changes again
      const task = await created();
      expect(await store.finish(leaseOf(task), { status: 'completed', result: { n: 1 } }, T0 + 10)).toBe(true);
      const after = await read(task.taskId);
      expect(
        await store.finish(leaseOf(task), { status: 'failed', error: { code: -32603, message: 'late' } }, T0 + 20),
      ).toBe(false);
      expect(await store.finish(leaseOf(task), { status: 'completed', result: { n: 2 } }, T0 + 30)).toBe(false);
      expect(await read(task.taskId)).toEqual(after);
    });

    it('refuses status messages, input requests, answers and cancel intents after the terminal write', async () => {
      // invariant: every write path checks "not yet terminal"; a terminal task never changes again
      const task = await created();
      const lease = leaseOf(task);
      expect((await store.requestInput(lease, 'confirm', elicit('sure?'), T0 + 1)).held).toBe(true);
      expect(await store.finish(lease, { status: 'cancelled' }, T0 + 2)).toBe(true);
      const after = await read(task.taskId);

      expect(await store.setStatusMessage(lease, 'too late', T0 + 3)).toBe(false);
      expect(await store.requestInput(lease, 'another', elicit('again?'), T0 + 4)).toEqual({
        held: false,
        response: undefined,
      });
      expect(await store.answerInputs(task.taskId, { confirm: accept('yes') }, T0 + 5)).toEqual([]);
      expect(await store.requestCancel(task.taskId, T0 + 6)).toBe(false);
      expect(await store.expireOverdue(T0 + 24 * 60 * MINUTE)).toEqual([]);
      expect(await read(task.taskId)).toEqual(after);
    });
  });
}
