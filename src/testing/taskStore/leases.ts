/**
 * The task-store contract's cases of leases: the fence, renewal, and the claims of orphaned tasks.
 */
import { beforeEach, describe, expect, it } from 'vitest';

import type { StoredTask, TaskStore } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { accept, elicit, leaseOf, MINUTE, SECOND, T0 } from './storeUnderTest.js';

/** A takeover's fence shuts the previous lease holder out of every handler write. */
export function describeFencing(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('fencing', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('refuses every handler write that carries the fence from before a takeover', async () => {
      // invariant: after claimOrphans bumps the fence, the old owner can neither write nor renew
      const task = await created({ leaseHolder: 'instance-a', leaseExpiresAt: T0 + 30 * SECOND });
      const stale = leaseOf(task);
      const [claimed] = await store.claimOrphans('instance-b', T0 + 31 * SECOND, T0 + 61 * SECOND, 10);
      expect(claimed?.fence).toBe(stale.fence + 1);
      const afterClaim = await read(task.taskId);

      expect(await store.setStatusMessage(stale, 'stale', T0 + 32 * SECOND)).toBe(false);
      expect(await store.requestInput(stale, 'k', elicit('stale?'), T0 + 32 * SECOND)).toEqual({
        held: false,
        response: undefined,
      });
      expect(await store.finish(stale, { status: 'completed', result: { from: 'a' } }, T0 + 32 * SECOND)).toBe(false);
      expect(await store.renewLeases('instance-a', [stale], T0 + 90 * SECOND)).toEqual([]);
      expect(await read(task.taskId)).toEqual(afterClaim);

      // the new owner's writes go through
      const fresh = leaseOf(claimed!);
      expect(await store.setStatusMessage(fresh, 'resumed', T0 + 33 * SECOND)).toBe(true);
      expect(await store.finish(fresh, { status: 'completed', result: { from: 'b' } }, T0 + 34 * SECOND)).toBe(true);
      expect((await read(task.taskId)).result).toEqual({ from: 'b' });
    });
  });
}

/** Lease renewal, the fallback read of awaited answers, and the claims of orphaned tasks. */
export function describeLeases(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('leases', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('renews only the leases the owner still holds, fence unchanged', async () => {
      // invariant: renewLeases extends held leases and reports the lost ones by leaving them out
      const held = await created({ leaseHolder: 'instance-a' });
      const othersTask = await created({ leaseHolder: 'instance-b' });
      const finished = await created({ leaseHolder: 'instance-a' });
      await store.finish(leaseOf(finished), { status: 'completed', result: {} }, T0 + 1);
      const staleFence = { taskId: held.taskId, fence: held.fence + 5 };

      const renewed = await store.renewLeases(
        'instance-a',
        [leaseOf(held), leaseOf(othersTask), leaseOf(finished), staleFence, { taskId: 'task-unknown', fence: 1 }],
        T0 + 5 * MINUTE,
      );
      expect(renewed).toEqual([{ ...leaseOf(held), cancelRequested: false }]);
      expect(await read(held.taskId)).toMatchObject({ leaseExpiresAt: T0 + 5 * MINUTE, fence: held.fence });
      expect(await read(othersTask.taskId)).toEqual(othersTask);
      expect(await store.renewLeases('instance-a', [], T0 + 5 * MINUTE)).toEqual([]);
    });

    it('renews thousands of leases in one call and says which tasks have a cancel requested', async () => {
      // invariant: renewal cost does not grow into per-task round trips; the cancel intent rides along as the lease
      // loop's fallback for a lost signal (docs/DESIGN.md, "Rules learned in the field", 8)
      const tasks = await Promise.all(Array.from({ length: 2000 }, () => created({ leaseHolder: 'instance-a' })));
      await store.requestCancel(tasks[7]!.taskId, T0 + 1);
      const renewed = await store.renewLeases('instance-a', tasks.map(leaseOf), T0 + 5 * MINUTE);
      expect(renewed).toHaveLength(2000);
      expect(renewed.filter((l) => l.cancelRequested).map((l) => l.taskId)).toEqual([tasks[7]!.taskId]);
      expect(await read(tasks[1999]!.taskId)).toMatchObject({ leaseExpiresAt: T0 + 5 * MINUTE });
      // 2,000 creates, each synced to disk on SQLite's durable default: seconds on a slow disk
    }, 60_000);

    it('reads the stored answers of awaited keys, and only those', async () => {
      // invariant: the fallback for a lost input signal is one read for every awaited key of every running task
      const a = await created();
      const b = await created();
      await store.requestInput(leaseOf(a), 'k1', elicit('?'), T0 + 1);
      await store.requestInput(leaseOf(a), 'k2', elicit('?'), T0 + 1);
      await store.requestInput(leaseOf(b), 'k1', elicit('?'), T0 + 1);
      await store.answerInputs(a.taskId, { k1: accept('a1') }, T0 + 2);
      await store.answerInputs(b.taskId, { k1: accept('b1') }, T0 + 2);
      const answered = await store.answeredInputs([
        { taskId: a.taskId, key: 'k1' },
        { taskId: a.taskId, key: 'k2' },
        { taskId: 'task-unknown', key: 'k1' },
      ]);
      expect(answered).toEqual([{ taskId: a.taskId, key: 'k1', response: accept('a1') }]);
      expect(await store.answeredInputs([])).toEqual([]);
    });

    it('claims open tasks whose lease expired, bumping fence and attempt, and leaves live leases alone', async () => {
      // invariant: takeover moves the lease to the claimer and fences out the previous owner
      const expired = await created({ leaseHolder: 'instance-a', leaseExpiresAt: T0 + 10 * SECOND });
      const waiting = await created({
        leaseHolder: 'instance-a',
        leaseExpiresAt: T0 + 10 * SECOND,
        createdAt: T0 + 1,
      });
      await store.requestInput(leaseOf(waiting), 'k', elicit('?'), T0 + 2);
      const live = await created({ leaseHolder: 'instance-c', leaseExpiresAt: T0 + 5 * MINUTE });

      const claimed = await store.claimOrphans('instance-b', T0 + MINUTE, T0 + 2 * MINUTE, 10);
      expect(claimed.map((task) => task.taskId).sort()).toEqual([expired.taskId, waiting.taskId].sort());
      for (const task of claimed) {
        expect(task).toMatchObject({
          leaseHolder: 'instance-b',
          leaseExpiresAt: T0 + 2 * MINUTE,
          fence: 2,
          attempt: 2,
        });
        // what claimOrphans returns is the task as stored, inputs included
        expect(task).toEqual(await read(task.taskId));
      }
      const claimedWaiting = claimed.find((task) => task.taskId === waiting.taskId)!;
      expect(claimedWaiting.status).toBe('input_required');
      expect(claimedWaiting.inputs.map((input) => input.key)).toEqual(['k']);
      expect(await read(live.taskId)).toEqual(live);

      // claimed once: the same sweep a moment later finds nothing
      expect(await store.claimOrphans('instance-d', T0 + MINUTE + 1, T0 + 3 * MINUTE, 10)).toEqual([]);
    });

    it('counts a new attempt for a holder claiming its own task only when it handed the lease back', async () => {
      // invariant: a holder's claim of its own lapsed lease continues its run (same attempt); a lease it handed back
      // (expiry 0, its run stopped) is run again, a new attempt even when the holder itself claims it
      const continued = await created({ leaseHolder: 'instance-a', leaseExpiresAt: T0 + SECOND });
      const handedBack = await created({ leaseHolder: 'instance-a', leaseExpiresAt: T0 + SECOND, createdAt: T0 + 1 });
      expect(await store.renewLeases('instance-a', [leaseOf(handedBack)], 0)).toHaveLength(1);
      const claimed = await store.claimOrphans('instance-a', T0 + MINUTE, T0 + 2 * MINUTE, 10);
      expect(claimed.map((task) => [task.taskId, task.fence, task.attempt])).toEqual([
        [continued.taskId, 2, 1],
        [handedBack.taskId, 2, 2],
      ]);
    });

    it('claims the live leases of dead owners', async () => {
      // invariant: a lease owner known to be dead loses its leases without waiting for them to expire
      const deadOnes = await created({ leaseHolder: 'instance-dead', leaseExpiresAt: T0 + 5 * MINUTE });
      const alive = await created({ leaseHolder: 'instance-alive', leaseExpiresAt: T0 + 5 * MINUTE });
      const claimed = await store.claimOrphans('instance-b', T0 + SECOND, T0 + MINUTE, 10, ['instance-dead']);
      expect(claimed.map((task) => task.taskId)).toEqual([deadOnes.taskId]);
      expect(claimed[0]).toMatchObject({ leaseHolder: 'instance-b', fence: 2, attempt: 2 });
      expect(await read(alive.taskId)).toEqual(alive);
    });

    it('honours the limit and claims the oldest first', async () => {
      // invariant: one sweep takes at most `limit` tasks, oldest first; the next sweep takes the rest
      const tasks: StoredTask[] = [];
      for (const offset of [3, 1, 2]) {
        tasks.push(await created({ createdAt: T0 + offset, leaseExpiresAt: T0 + 10 * SECOND }));
      }
      const [third, first, second] = tasks;
      const sweep1 = await store.claimOrphans('instance-b', T0 + MINUTE, T0 + 2 * MINUTE, 2);
      expect(sweep1.map((task) => task.taskId)).toEqual([first!.taskId, second!.taskId]);
      expect((await read(third!.taskId)).fence).toBe(1);
      const sweep2 = await store.claimOrphans('instance-b', T0 + MINUTE, T0 + 2 * MINUTE, 2);
      expect(sweep2.map((task) => task.taskId)).toEqual([third!.taskId]);
    });

    it('never claims a terminal task', async () => {
      // invariant: a terminal task never changes again, even when its last owner is dead or its lease long gone
      const task = await created({ leaseHolder: 'instance-dead', leaseExpiresAt: T0 + SECOND });
      await store.finish(leaseOf(task), { status: 'failed', error: { code: -32603, message: 'x' } }, T0 + 2);
      const after = await read(task.taskId);
      expect(await store.claimOrphans('instance-b', T0 + MINUTE, T0 + 2 * MINUTE, 10, ['instance-dead'])).toEqual([]);
      expect(await read(task.taskId)).toEqual(after);
    });

    it('lists the distinct lease owners of open tasks only', async () => {
      // invariant: leaseHolders names every instance that still holds an open task, once each
      expect(await store.leaseHolders()).toEqual([]);
      await created({ leaseHolder: 'instance-a' });
      await created({ leaseHolder: 'instance-a' });
      await created({ leaseHolder: 'instance-b' });
      const done = await created({ leaseHolder: 'instance-c' });
      await store.finish(leaseOf(done), { status: 'completed', result: {} }, T0 + 1);
      expect([...(await store.leaseHolders())].sort()).toEqual(['instance-a', 'instance-b']);
    });
  });
}
