/**
 * The task-store contract's cases of input: requests raised by the lease holder and the answers that meet them.
 */
import { beforeEach, describe, expect, it } from 'vitest';

import type { TaskStore } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { accept, elicit, leaseOf, T0 } from './storeUnderTest.js';

/** An input request: stored once per key, moving the task to input_required. */
export function describeRequestInput(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('requestInput', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('stores a new key and moves the task to input_required', async () => {
      // invariant: a new key persists the request and flips the status before the handler waits
      const task = await created();
      const request = elicit('Which colour?');
      expect(await store.requestInput(leaseOf(task), 'colour', request, T0 + 3)).toEqual({
        held: true,
        response: undefined,
      });
      const stored = await read(task.taskId);
      expect(stored.status).toBe('input_required');
      expect(stored.lastUpdatedAt).toBe(T0 + 3);
      expect(stored.inputs).toEqual([
        { key: 'colour', request, response: undefined, requestedAt: T0 + 3, answeredAt: undefined },
      ]);
    });

    it('leaves an outstanding key as it is when it is requested again', async () => {
      // invariant: keys are unique over the task's life: asking again neither duplicates nor replaces the request
      const task = await created();
      const first = elicit('first wording');
      await store.requestInput(leaseOf(task), 'colour', first, T0 + 3);
      expect(await store.requestInput(leaseOf(task), 'colour', elicit('second wording'), T0 + 4)).toEqual({
        held: true,
        response: undefined,
      });
      const stored = await read(task.taskId);
      expect(stored.status).toBe('input_required');
      expect(stored.inputs).toEqual([
        { key: 'colour', request: first, response: undefined, requestedAt: T0 + 3, answeredAt: undefined },
      ]);
    });

    it('returns the stored response for a key already answered and changes nothing', async () => {
      // invariant: a replay after restart asks nothing twice: an answered key resolves from the store
      const task = await created();
      await store.requestInput(leaseOf(task), 'colour', elicit('Which colour?'), T0 + 3);
      expect(await store.answerInputs(task.taskId, { colour: accept('blue') }, T0 + 4)).toEqual(['colour']);
      const before = await read(task.taskId);
      expect(await store.requestInput(leaseOf(task), 'colour', elicit('Which colour?'), T0 + 5)).toEqual({
        held: true,
        response: accept('blue'),
      });
      expect(await read(task.taskId)).toEqual(before);
      expect(before.status).toBe('working');
    });

    it('keeps every input request in the order it was raised', async () => {
      // invariant: inputs are listed in raise order, not by key
      const task = await created();
      for (const [i, key] of ['zeta', 'alpha', 'mid'].entries()) {
        await store.requestInput(leaseOf(task), key, elicit(key), T0 + i);
      }
      expect((await read(task.taskId)).inputs.map((input) => input.key)).toEqual(['zeta', 'alpha', 'mid']);
    });

    it('refuses an input request for an unknown task', async () => {
      // invariant: no write ever creates a row
      expect(await store.requestInput({ taskId: 'task-unknown', fence: 1 }, 'k', elicit('?'), T0)).toEqual({
        held: false,
        response: undefined,
      });
      expect(await store.get('task-unknown')).toBeUndefined();
    });
  });
}

/** Answers (tasks/update): stored for outstanding keys only, the first answer standing. */
export function describeAnswerInputs(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('answerInputs', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('keeps input_required while some keys are still outstanding', async () => {
      // invariant: a partial answer stores what it can and the task keeps waiting for the rest
      const task = await created();
      await store.requestInput(leaseOf(task), 'name', elicit('Name?'), T0 + 1);
      await store.requestInput(leaseOf(task), 'age', elicit('Age?'), T0 + 2);
      expect(await store.answerInputs(task.taskId, { name: accept('Ada') }, T0 + 3)).toEqual(['name']);
      const stored = await read(task.taskId);
      expect(stored.status).toBe('input_required');
      expect(stored.lastUpdatedAt).toBe(T0 + 3);
      expect(stored.inputs).toEqual([
        { key: 'name', request: elicit('Name?'), response: accept('Ada'), requestedAt: T0 + 1, answeredAt: T0 + 3 },
        { key: 'age', request: elicit('Age?'), response: undefined, requestedAt: T0 + 2, answeredAt: undefined },
      ]);
    });

    it('moves the task back to working once every key is answered', async () => {
      // invariant: nothing outstanding means input_required is over
      const task = await created();
      await store.requestInput(leaseOf(task), 'name', elicit('Name?'), T0 + 1);
      await store.requestInput(leaseOf(task), 'age', elicit('Age?'), T0 + 2);
      const accepted = await store.answerInputs(task.taskId, { name: accept('Ada'), age: accept('36') }, T0 + 3);
      expect([...accepted].sort()).toEqual(['age', 'name']);
      const stored = await read(task.taskId);
      expect(stored.status).toBe('working');
      expect(stored.lastUpdatedAt).toBe(T0 + 3);
      expect(stored.inputs.every((input) => input.answeredAt === T0 + 3)).toBe(true);
    });

    it('ignores unknown and already-answered keys and does not return them', async () => {
      // invariant: tasks/update stores responses for outstanding keys only; the first answer stands
      const task = await created();
      await store.requestInput(leaseOf(task), 'name', elicit('Name?'), T0 + 1);
      await store.requestInput(leaseOf(task), 'age', elicit('Age?'), T0 + 2);
      expect(await store.answerInputs(task.taskId, { name: accept('Ada') }, T0 + 3)).toEqual(['name']);
      const accepted = await store.answerInputs(
        task.taskId,
        { name: accept('Grace'), nonsense: accept('?'), age: accept('36') },
        T0 + 4,
      );
      expect(accepted).toEqual(['age']);
      const stored = await read(task.taskId);
      expect(stored.inputs.map((input) => [input.key, input.response, input.answeredAt])).toEqual([
        ['name', accept('Ada'), T0 + 3],
        ['age', accept('36'), T0 + 4],
      ]);
      expect(stored.status).toBe('working');
    });

    it('changes nothing when it accepts nothing', async () => {
      // invariant: an update with no outstanding key is a no-op, lastUpdatedAt included
      const task = await created();
      await store.requestInput(leaseOf(task), 'name', elicit('Name?'), T0 + 1);
      const before = await read(task.taskId);
      expect(await store.answerInputs(task.taskId, { other: accept('x') }, T0 + 9)).toEqual([]);
      expect(await store.answerInputs(task.taskId, {}, T0 + 9)).toEqual([]);
      expect(await read(task.taskId)).toEqual(before);
    });

    it('accepts nothing for an unknown task', async () => {
      // invariant: no write ever creates a row
      expect(await store.answerInputs('task-unknown', { k: accept('x') }, T0)).toEqual([]);
      expect(await store.get('task-unknown')).toBeUndefined();
    });
  });
}
