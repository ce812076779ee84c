/**
 * The task-store contract's cases of durable steps and the checkpoint.
 */
import { beforeEach, describe, expect, it } from 'vitest';

import type { TaskStore } from '../../server/store/taskStore.js';
import { StepLimitError } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { leaseOf, MINUTE, SECOND, T0 } from './storeUnderTest.js';

/** Steps and the checkpoint: written by the lease holder only, within the limits, read back by the next attempt. */
export function describeDurableSteps(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('durable steps', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('commits a step for the lease holder and reads it back, in commit order, with the checkpoint', async () => {
      // invariant: what a step or checkpoint write acknowledged is what the next attempt reads
      const task = await created();
      const lease = leaseOf(task);
      expect(await store.readSteps(task.taskId)).toEqual({ steps: [], checkpoint: undefined });
      expect(await store.recordStep(lease, 'start-job', { jobId: 'j-1', tags: ['a', 'ü'] }, T0 + 1)).toEqual({
        held: true,
        step: { name: 'start-job', result: { jobId: 'j-1', tags: ['a', 'ü'] }, committedAt: T0 + 1 },
      });
      expect((await store.recordStep(lease, 'notify', undefined, T0 + 2)).held).toBe(true);
      expect((await store.recordStep(lease, 'zero', 0, T0 + 3)).held).toBe(true);
      expect(await store.saveCheckpoint(lease, { done: 3 }, T0 + 4)).toBe(true);
      expect(await store.saveCheckpoint(lease, { done: 4 }, T0 + 5)).toBe(true);
      expect(await store.readSteps(task.taskId)).toEqual({
        steps: [
          { name: 'start-job', result: { jobId: 'j-1', tags: ['a', 'ü'] }, committedAt: T0 + 1 },
          { name: 'notify', result: undefined, committedAt: T0 + 2 },
          { name: 'zero', result: 0, committedAt: T0 + 3 },
        ],
        checkpoint: { done: 4 },
      });
      // the task itself is untouched by its steps
      expect((await read(task.taskId)).status).toBe('working');
    });

    it('keeps the first result of a name: a second write returns it and changes nothing', async () => {
      const task = await created();
      await store.recordStep(leaseOf(task), 'start-job', { jobId: 'first' }, T0 + 1);
      expect(await store.recordStep(leaseOf(task), 'start-job', { jobId: 'second' }, T0 + 2)).toEqual({
        held: true,
        step: { name: 'start-job', result: { jobId: 'first' }, committedAt: T0 + 1 },
      });
      expect((await store.readSteps(task.taskId)).steps).toHaveLength(1);
    });

    it('refuses step and checkpoint writes with a stale fence, and after the terminal write', async () => {
      // invariant: only the lease holder writes steps (a takeover's fence shuts the old holder out)
      const task = await created({ leaseHolder: 'instance-a', leaseExpiresAt: T0 + 30 * SECOND });
      const stale = leaseOf(task);
      await store.recordStep(stale, 'before', 1, T0 + 1);
      const [claimed] = await store.claimOrphans('instance-b', T0 + 31 * SECOND, T0 + 61 * SECOND, 10);
      expect(await store.recordStep(stale, 'late', 2, T0 + 32 * SECOND)).toEqual({ held: false, step: undefined });
      expect(await store.recordStep(stale, 'before', 3, T0 + 32 * SECOND)).toEqual({ held: false, step: undefined });
      expect(await store.saveCheckpoint(stale, 'stale', T0 + 32 * SECOND)).toBe(false);
      expect(await store.readSteps(task.taskId)).toEqual({
        steps: [{ name: 'before', result: 1, committedAt: T0 + 1 }],
        checkpoint: undefined,
      });
      const fresh = leaseOf(claimed!);
      expect((await store.recordStep(fresh, 'late', 4, T0 + 33 * SECOND)).held).toBe(true);
      await store.finish(fresh, { status: 'completed', result: {} }, T0 + 34 * SECOND);
      expect(await store.recordStep(fresh, 'after', 5, T0 + 35 * SECOND)).toEqual({ held: false, step: undefined });
      expect(await store.saveCheckpoint(fresh, 'after', T0 + 35 * SECOND)).toBe(false);
      expect((await store.readSteps(task.taskId)).steps.map((s) => s.name)).toEqual(['before', 'late']);
      expect(await store.recordStep({ taskId: 'task-unknown', fence: 1 }, 'x', 1, T0)).toEqual({
        held: false,
        step: undefined,
      });
    });

    it('refuses a step over maxSteps and a write over maxTotalBytes, storing nothing of it', async () => {
      const task = await created();
      const lease = leaseOf(task);
      const limits = { maxSteps: 2, maxTotalBytes: 20 };
      await store.recordStep(lease, 'a', 'x'.repeat(4), T0 + 1, limits); // 6 bytes
      const tooBig = store.recordStep(lease, 'b', 'y'.repeat(20), T0 + 2, limits);
      await expect(tooBig).rejects.toBeInstanceOf(StepLimitError);
      await expect(tooBig).rejects.toMatchObject({ kind: 'bytes', limit: 20, wouldHold: 28 });
      await store.recordStep(lease, 'b', 'y', T0 + 3, limits); // 3 bytes: 9 in all
      await expect(store.recordStep(lease, 'c', 1, T0 + 4, limits)).rejects.toMatchObject({
        kind: 'steps',
        limit: 2,
      });
      // a checkpoint counts with the steps, and replaces its earlier value in the count
      expect(await store.saveCheckpoint(lease, 'z'.repeat(9), T0 + 5, limits)).toBe(true); // 11 bytes: 20
      expect(await store.saveCheckpoint(lease, 'w'.repeat(9), T0 + 6, limits)).toBe(true);
      await expect(store.saveCheckpoint(lease, 'v'.repeat(10), T0 + 7, limits)).rejects.toMatchObject({
        kind: 'bytes',
        limit: 20,
        wouldHold: 21,
      });
      expect(await store.readSteps(task.taskId)).toEqual({
        steps: [
          { name: 'a', result: 'xxxx', committedAt: T0 + 1 },
          { name: 'b', result: 'y', committedAt: T0 + 3 },
        ],
        checkpoint: 'w'.repeat(9),
      });
    });

    it('keeps steps through a takeover, for the next attempt to read', async (ctx) => {
      const task = await created({ leaseHolder: 'instance-a', leaseExpiresAt: T0 + 30 * SECOND });
      await store.recordStep(leaseOf(task), 'start-job', { jobId: 'j-9' }, T0 + 1);
      await store.saveCheckpoint(leaseOf(task), { next: 7 }, T0 + 2);
      await store.claimOrphans('instance-b', T0 + 31 * SECOND, T0 + 61 * SECOND, 10);
      const expected = {
        steps: [{ name: 'start-job', result: { jobId: 'j-9' }, committedAt: T0 + 1 }],
        checkpoint: { next: 7 },
      };
      expect(await store.readSteps(task.taskId)).toEqual(expected);
      const second = await subject.secondInstance();
      if (!second) return ctx.skip();
      expect(await second.readSteps(task.taskId)).toEqual(expected);
    });

    it('purges a task’s steps and checkpoint with the task', async () => {
      const task = await created({ ttlMs: MINUTE });
      await store.recordStep(leaseOf(task), 'a', { big: 'x'.repeat(1000) }, T0 + 1);
      await store.saveCheckpoint(leaseOf(task), 1, T0 + 2);
      await store.finish(leaseOf(task), { status: 'completed', result: {} }, T0 + 3);
      const other = await created();
      await store.recordStep(leaseOf(other), 'a', 'kept', T0 + 4);
      expect(await store.purge(T0 + 2 * MINUTE, 0)).toBe(1);
      expect(await store.readSteps(task.taskId)).toEqual({ steps: [], checkpoint: undefined });
      expect((await store.readSteps(other.taskId)).steps).toHaveLength(1);
    });
  });
}
