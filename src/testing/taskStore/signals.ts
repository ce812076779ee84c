/**
 * The task-store contract's cases of the cancel intent and the signals that reach a running handler.
 */
import { beforeEach, describe, expect, it, vi } from 'vitest';

import type { TaskSignal, TaskStore } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { accept, elicit, leaseOf, T0 } from './storeUnderTest.js';

/** The cancel intent (tasks/cancel): recorded on an open task, the status left to the runtime. */
export function describeRequestCancel(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('requestCancel', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('records the intent on an open task without changing its status', async () => {
      // invariant: tasks/cancel records the intent and acks; the runtime, not the store, ends the task
      const task = await created();
      expect(await store.requestCancel(task.taskId, T0 + 7)).toBe(true);
      const stored = await read(task.taskId);
      expect(stored).toMatchObject({ status: 'working', cancelRequested: true, lastUpdatedAt: T0 + 7 });
      // asking again still acks and keeps the intent
      expect(await store.requestCancel(task.taskId, T0 + 8)).toBe(true);
      expect((await read(task.taskId)).cancelRequested).toBe(true);
    });

    it('records the intent on a task waiting for input', async () => {
      // invariant: input_required is open, so it can be cancelled
      const task = await created();
      await store.requestInput(leaseOf(task), 'k', elicit('?'), T0 + 1);
      expect(await store.requestCancel(task.taskId, T0 + 2)).toBe(true);
      expect(await read(task.taskId)).toMatchObject({ status: 'input_required', cancelRequested: true });
    });

    it('answers false for a terminal or unknown task', async () => {
      // invariant: there is nothing to cancel once terminal, and unknown ids are not created
      const task = await created();
      await store.finish(leaseOf(task), { status: 'completed', result: {} }, T0 + 1);
      expect(await store.requestCancel(task.taskId, T0 + 2)).toBe(false);
      expect((await read(task.taskId)).cancelRequested).toBe(false);
      expect(await store.requestCancel('task-unknown', T0 + 2)).toBe(false);
      expect(await store.get('task-unknown')).toBeUndefined();
    });
  });
}

/** What a running handler hears through subscribe: accepted answers and cancel intents, nothing else. */
export function describeSignals(subject: StoreUnderTest): void {
  const { created } = subject;
  let store: TaskStore;

  describe('signals', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('tells subscribers about accepted answers and cancel intents, and nothing else', async (ctx) => {
      // invariant: input and cancel reach a running handler through subscribe; refused writes signal nothing
      if (!store.subscribe) return ctx.skip();
      const signals: TaskSignal[] = [];
      // status signals (PostgreSQL's, for push) are not what a handler hears about: left out here
      const unsubscribe = store.subscribe((signal) => void (signal.kind !== 'status' && signals.push(signal)));
      const task = await created();
      const done = await created();
      await store.finish(leaseOf(done), { status: 'completed', result: {} }, T0 + 1);
      await store.requestInput(leaseOf(task), 'k', elicit('?'), T0 + 1);

      // refused: these must not signal (delivery is in commit order, so they would show up first)
      expect(await store.answerInputs(task.taskId, { unknown: accept('x') }, T0 + 2)).toEqual([]);
      expect(await store.requestCancel(done.taskId, T0 + 2)).toBe(false);
      expect(await store.requestCancel('task-unknown', T0 + 2)).toBe(false);

      expect(await store.answerInputs(task.taskId, { k: accept('x') }, T0 + 3)).toEqual(['k']);
      expect(await store.requestCancel(task.taskId, T0 + 4)).toBe(true);
      await vi.waitFor(() => expect(signals).toHaveLength(2), { timeout: 5000, interval: 10 });
      expect(signals).toEqual([
        { taskId: task.taskId, kind: 'input' },
        { taskId: task.taskId, kind: 'cancel' },
      ]);

      // after unsubscribing, a listener hears nothing more (a second listener proves the signal went out)
      const later: TaskSignal[] = [];
      const unsubscribeLater = store.subscribe((signal) => void (signal.kind !== 'status' && later.push(signal)));
      unsubscribe();
      const other = await created();
      expect(await store.requestCancel(other.taskId, T0 + 5)).toBe(true);
      await vi.waitFor(() => expect(later).toEqual([{ taskId: other.taskId, kind: 'cancel' }]), {
        timeout: 5000,
        interval: 10,
      });
      expect(signals).toHaveLength(2);
      unsubscribeLater();
    });
  });
}
