/**
 * The task-store contract's cases of retention: expiry past the TTL and the purge after the retention.
 */
import { beforeEach, describe, expect, it } from 'vitest';

import type { TaskStore } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { accept, elicit, leaseOf, MINUTE, T0 } from './storeUnderTest.js';

/** An open task past its TTL is failed as expired. */
export function describeExpiry(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('expiry', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('fails open tasks past createdAt + ttlMs with -32603 "expired", and nothing else', async () => {
      // invariant: past its TTL a non-terminal task is failed as expired; an unlimited TTL never expires
      const short = await created({ ttlMs: MINUTE });
      const waiting = await created({ ttlMs: MINUTE });
      await store.requestInput(leaseOf(waiting), 'k', elicit('?'), T0 + 1);
      const long = await created({ ttlMs: 10 * MINUTE });
      const unlimited = await created({ ttlMs: null });

      expect(await store.expireOverdue(T0 + MINUTE - 1)).toEqual([]);
      const expired = await store.expireOverdue(T0 + MINUTE + 1);
      expect([...expired].sort()).toEqual([short.taskId, waiting.taskId].sort());

      for (const taskId of expired) {
        const stored = await read(taskId);
        expect(stored.status).toBe('failed');
        expect(stored.error?.code).toBe(-32603);
        expect(stored.error?.message).toMatch(/expired/i);
        expect(stored.lastUpdatedAt).toBe(T0 + MINUTE + 1);
        expect(stored.leaseHolder).toBeUndefined();
      }
      expect(await read(long.taskId)).toEqual(long);
      expect(await read(unlimited.taskId)).toEqual(unlimited);
      expect(await store.expireOverdue(T0 + 365 * 24 * 60 * MINUTE)).toEqual([long.taskId]);
      expect((await read(unlimited.taskId)).status).toBe('working');

      // the handler's late result loses to the expiry
      expect(await store.finish(leaseOf(short), { status: 'completed', result: {} }, T0 + 2 * MINUTE)).toBe(false);
      expect((await read(short.taskId)).status).toBe('failed');
    });
  });
}

/** Terminal tasks go after their retention, in small steps, and their ids are remembered for a week. */
export function describePurge(subject: StoreUnderTest): void {
  const { created } = subject;
  let store: TaskStore;

  describe('purge', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('deletes only terminal tasks past createdAt + ttlMs + retention and remembers their ids', async () => {
      // invariant: terminal rows go after their retention; open rows and unlimited TTLs stay; purged ids say so
      const retention = 5 * MINUTE;
      const old = await created({ ttlMs: MINUTE });
      await store.requestInput(leaseOf(old), 'k', elicit('?'), T0 + 1);
      await store.finish(leaseOf(old), { status: 'completed', result: {} }, T0 + 2);
      const recent = await created({ ttlMs: MINUTE, createdAt: T0 + 10 * MINUTE });
      await store.finish(leaseOf(recent), { status: 'cancelled' }, T0 + 10 * MINUTE + 1);
      const open = await created({ ttlMs: MINUTE });
      const unlimited = await created({ ttlMs: null });
      await store.finish(leaseOf(unlimited), { status: 'completed', result: {} }, T0 + 3);

      expect(await store.purge(T0 + MINUTE + retention - 1, retention)).toBe(0);
      expect(await store.purge(T0 + MINUTE + retention + 1, retention)).toBe(1);

      expect(await store.get(old.taskId)).toBeUndefined();
      expect(await store.wasPurged(old.taskId, 'alice')).toBe(true);
      // only its owner learns that the id existed: anyone else gets what an unknown id gets
      expect(await store.wasPurged(old.taskId, 'bob')).toBe(false);
      for (const kept of [recent, open, unlimited]) {
        expect(await store.get(kept.taskId)).toBeDefined();
        expect(await store.wasPurged(kept.taskId, 'alice')).toBe(false);
      }
      // a purged task is gone for every write path too
      expect(await store.answerInputs(old.taskId, { k: accept('x') }, T0 + 20 * MINUTE)).toEqual([]);
      expect(await store.requestCancel(old.taskId, T0 + 20 * MINUTE)).toBe(false);
      expect(await store.get(old.taskId)).toBeUndefined();
    });

    it('purges in steps of at most `limit` tasks, and drops week-old tombstones in steps too', async () => {
      // invariant: one purge call is a small step that never holds the store for long (docs/DESIGN.md, "Rules learned
      // in the field", 8)
      const done = await Promise.all(Array.from({ length: 7 }, () => created({ ttlMs: MINUTE })));
      for (const task of done) await store.finish(leaseOf(task), { status: 'completed', result: {} }, T0 + 1);
      const at = T0 + 2 * MINUTE;
      expect(await store.purge(at, 0, { limit: 3 })).toBe(3);
      expect(await store.purge(at, 0, { limit: 3 })).toBe(3);
      expect(await store.purge(at, 0, { limit: 3 })).toBe(1);
      expect(await store.purge(at, 0, { limit: 3 })).toBe(0);
      // a week and a day later the tombstones go, three at a time
      const later = at + 8 * 24 * 60 * MINUTE;
      expect(await store.purge(later, 0, { limit: 3 })).toBe(3);
      expect(await store.purge(later, 0, { limit: 3 })).toBe(3);
      expect(await store.purge(later, 0, { limit: 3 })).toBe(1);
      expect(await store.wasPurged(done[0]!.taskId, 'alice')).toBe(false);
    });

    it('purges a finished task without a TTL `unlimitedRetentionMs` after it finished, and only when asked', async () => {
      // invariant: a task with ttlMs null is not kept for ever once it finished; an open one stays
      const finished = await created({ ttlMs: null });
      await store.finish(leaseOf(finished), { status: 'completed', result: {} }, T0 + MINUTE);
      const open = await created({ ttlMs: null });
      const bound = { unlimitedRetentionMs: 10 * MINUTE };
      expect(await store.purge(T0 + 100 * MINUTE, 0)).toBe(0);
      expect(await store.purge(T0 + 11 * MINUTE - 1, 0, bound)).toBe(0);
      expect(await store.purge(T0 + 11 * MINUTE, 0, bound)).toBe(1);
      expect(await store.get(finished.taskId)).toBeUndefined();
      expect(await store.wasPurged(finished.taskId, 'alice')).toBe(true);
      expect(await store.get(open.taskId)).toBeDefined();
    });
  });
}
