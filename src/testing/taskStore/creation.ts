/**
 * The task-store contract's cases of creation: a new task as stored and read back, the per-principal limits, and
 * idempotent creation.
 */
import { beforeEach, describe, expect, it } from 'vitest';

import type { TaskStore } from '../../server/store/taskStore.js';
import { OpenTaskLimitError, StoredTaskLimitError } from '../../server/store/taskStore.js';
import type { StoreUnderTest } from './storeUnderTest.js';
import { elicit, leaseOf, MINUTE, newTask, SECOND, T0 } from './storeUnderTest.js';

/** A new task: what create stores and answers, read back by get and by the batch reads, under the per-principal limits. */
export function describeCreation(subject: StoreUnderTest): void {
  const { created, read } = subject;
  let store: TaskStore;

  describe('creation', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('makes a task visible to get at once, working, with the creator holding the first lease', async () => {
      // invariant: create resolves only after the row is committed, so the very next get sees it
      const input = newTask();
      const { task, created: wasCreated } = await store.create(input);
      expect(wasCreated).toBe(true);
      const stored = await read(input.taskId);
      expect(stored).toEqual(task);
      expect(stored).toMatchObject({
        taskId: input.taskId,
        status: 'working',
        createdAt: T0,
        lastUpdatedAt: T0,
        leaseHolder: 'instance-a',
        leaseExpiresAt: T0 + 30 * SECOND,
        fence: 1,
        attempt: 1,
        cancelRequested: false,
        inputs: [],
      });
      expect(stored.result).toBeUndefined();
      expect(stored.error).toBeUndefined();
    });

    it('makes a task visible at once to a second store instance on the same database', async (ctx) => {
      // invariant: the row is the truth: any instance reads a task the moment its create resolved
      const second = await subject.secondInstance();
      if (!second) return ctx.skip();
      const task = await created();
      expect(await read(task.taskId, second)).toEqual(task);
      // and the other way round, including a later change
      const other = await second.create(newTask({ principal: 'bob' }));
      expect(await read(other.task.taskId)).toEqual(other.task);
      expect(await store.setStatusMessage(leaseOf(task), 'halfway', T0 + 1)).toBe(true);
      expect((await read(task.taskId, second)).statusMessage).toBe('halfway');
    });

    it('keeps the input kinds the creating request declared, through get, idempotent replay and takeover', async () => {
      // invariant (docs/DESIGN.md rule 6): the declaration belongs to the task, so a new owner reads it from the row
      const inputCapabilities = { elicitation: { form: {}, url: {} }, roots: { listChanged: true } };
      const task = await created({ inputCapabilities, idempotencyKey: 'caps-key' });
      expect(task.inputCapabilities).toEqual(inputCapabilities);
      expect((await read(task.taskId)).inputCapabilities).toEqual(inputCapabilities);
      const replay = await store.create(newTask({ idempotencyKey: 'caps-key', inputCapabilities: {} }));
      expect(replay.created).toBe(false);
      expect(replay.task.inputCapabilities).toEqual(inputCapabilities);
      const [claimed] = await store.claimOrphans('instance-b', T0 + 31 * SECOND, T0 + 61 * SECOND, 10);
      expect(claimed?.inputCapabilities).toEqual(inputCapabilities);
      // nothing declared is not the same as not recorded
      expect((await created({ inputCapabilities: {} })).inputCapabilities).toEqual({});
      expect((await read((await created()).taskId)).inputCapabilities).toBeUndefined();
    });

    it('keeps the trace context of the creating call, through get and takeover', async () => {
      // invariant (docs/operations.md, "Observability"): a run after a takeover joins the trace of the call that created it
      const traceContext = {
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        tracestate: 'vendor=opaque',
      };
      const task = await created({ traceContext });
      expect(task.traceContext).toEqual(traceContext);
      expect((await read(task.taskId)).traceContext).toEqual(traceContext);
      const [claimed] = await store.claimOrphans('instance-b', T0 + 31 * SECOND, T0 + 61 * SECOND, 10);
      expect(claimed?.traceContext).toEqual(traceContext);
      expect((await read((await created()).taskId)).traceContext).toBeUndefined();
    });

    it('round-trips every field of a new task exactly', async () => {
      // invariant: what create was given is what get returns, including JSON that some column types reject
      const args = {
        text: 'héllo 🌍 \u0000 end',
        lone: '\ud800 half a surrogate',
        nested: { list: [1, 2.5, -3, null, true, 'x'], empty: {}, deep: { a: [{ b: 'c' }] } },
        big: Number.MAX_SAFE_INTEGER,
        quote: `"'\\`,
      };
      const input = newTask({
        arguments: args,
        ttlMs: null,
        pollIntervalMs: 2750,
        resumable: true,
        idempotencyKey: 'key-1',
        statusMessage: 'queued',
        principal: 'principal:alice@example.com',
        toolName: 'long_report',
        createdAt: T0 + 7,
        leaseHolder: 'instance-z',
        leaseExpiresAt: T0 + 99_999,
      });
      const { task: createdTask } = await store.create(input);
      const stored = await read(input.taskId);
      // and what create answered is what every later read answers, field for field
      expect(createdTask).toEqual(stored);
      expect(stored.arguments).toEqual(args);
      expect(stored).toMatchObject({
        principal: 'principal:alice@example.com',
        toolName: 'long_report',
        ttlMs: null,
        pollIntervalMs: 2750,
        resumable: true,
        idempotencyKey: 'key-1',
        statusMessage: 'queued',
        createdAt: T0 + 7,
        lastUpdatedAt: T0 + 7,
        leaseHolder: 'instance-z',
        leaseExpiresAt: T0 + 99_999,
      });
    });

    it('answers each of many creates made at once with what get reads, whatever fields it carries', async () => {
      // invariant: a create made with others (one statement on PostgreSQL), under the per-principal limits or not,
      // answers the row it wrote, not a copy of another's
      const inputs = Array.from({ length: 12 }, (_, i) =>
        newTask({
          arguments: { i, text: 'x'.repeat(i * 100) },
          principal: `principal-${i % 3}`,
          ttlMs: i % 2 === 0 ? null : 1000 * (i + 1),
          statusMessage: i % 4 === 0 ? `queued ${i}` : undefined,
          idempotencyKey: i % 3 === 0 ? `key-${i}` : undefined,
          inputCapabilities: i % 5 === 0 ? { elicitation: { form: {} } } : undefined,
          traceContext: i % 6 === 0 ? { traceparent: `00-${'a'.repeat(31)}${i % 10}-${'b'.repeat(16)}-01` } : undefined,
          ...(i % 2 === 0 ? { maxOpenTasksForPrincipal: 100, maxStoredTasksForPrincipal: 1000 } : {}),
        }),
      );
      const answers = await Promise.all(inputs.map((input) => store.create(input)));
      for (const [i, { task, created }] of answers.entries()) {
        expect(created).toBe(true);
        expect(task.taskId).toBe(inputs[i]!.taskId);
        expect(task).toEqual(await read(inputs[i]!.taskId));
      }
    });

    it('round-trips absent optional fields as undefined and a numeric ttlMs as a number', async () => {
      // invariant: no optional field comes back as null or "" when it was not given
      const input = newTask({ ttlMs: 45_000, resumable: false });
      await store.create(input);
      const stored = await read(input.taskId);
      expect(stored.ttlMs).toBe(45_000);
      expect(stored.resumable).toBe(false);
      expect(stored.idempotencyKey).toBeUndefined();
      expect(stored.statusMessage).toBeUndefined();
    });

    it('keeps each task owner with its task', async () => {
      // invariant: the owner (the caller's principal) is stored per task, so reads can be restricted to it
      const a = await created({ principal: 'alice' });
      const b = await created({ principal: 'bob' });
      expect((await read(a.taskId)).principal).toBe('alice');
      expect((await read(b.taskId)).principal).toBe('bob');
    });

    it('refuses a create over maxOpenTasksForPrincipal, counting that principal’s open tasks, never an idempotent replay', async () => {
      // invariant: the per-principal open-task limit holds under concurrent creates, and a retry is never refused
      const limit = { maxOpenTasksForPrincipal: 2 };
      const first = await created({ principal: 'alice', idempotencyKey: 'k1', ...limit });
      await created({ principal: 'alice', ...limit });
      await created({ principal: 'bob', ...limit });
      const over = newTask({ principal: 'alice', ...limit });
      await expect(store.create(over)).rejects.toBeInstanceOf(OpenTaskLimitError);
      expect(await store.get(over.taskId)).toBeUndefined();
      expect(await store.create(newTask({ principal: 'alice', idempotencyKey: 'k1', ...limit }))).toEqual({
        task: first,
        created: false,
      });
      await store.finish(leaseOf(first), { status: 'completed', result: {} }, T0 + 1);
      expect((await store.create(newTask({ principal: 'alice', ...limit }))).created).toBe(true);
      const racing = await Promise.allSettled(
        Array.from({ length: 6 }, () => store.create(newTask({ principal: 'carol', maxOpenTasksForPrincipal: 3 }))),
      );
      expect(racing.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
      for (const r of racing) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(OpenTaskLimitError);
    });

    it('refuses a create over maxStoredTasksForPrincipal, counting finished tasks too, never an idempotent replay', async () => {
      // invariant: what one owner keeps stored (open and retained finished tasks) is bounded
      const limit = { maxStoredTasksForPrincipal: 2 };
      const first = await created({ principal: 'dora', idempotencyKey: 'k-stored', ...limit });
      await store.finish(leaseOf(first), { status: 'completed', result: {} }, T0 + 1);
      await created({ principal: 'dora', ...limit });
      await created({ principal: 'erin', ...limit });
      const over = newTask({ principal: 'dora', ...limit });
      await expect(store.create(over)).rejects.toBeInstanceOf(StoredTaskLimitError);
      await expect(store.create(over)).rejects.toMatchObject({ limit: 2 });
      expect(await store.get(over.taskId)).toBeUndefined();
      expect((await store.create(newTask({ principal: 'dora', idempotencyKey: 'k-stored', ...limit }))).created).toBe(
        false,
      );
    });

    it('reads many tasks in one getMany, each as get reads it, unknown ids left out', async (ctx) => {
      // invariant: push reads its subscribed ids in one go; what it reads is what get reads
      if (!store.getMany) return ctx.skip();
      const first = await created();
      const second = await created();
      await store.requestInput(leaseOf(second), 'k', elicit('?'), T0 + 1);
      const many = await store.getMany([second.taskId, 'task-unknown', first.taskId]);
      const byId = new Map(many.map((task) => [task.taskId, task]));
      expect([...byId.keys()].sort()).toEqual([first.taskId, second.taskId].sort());
      expect(byId.get(first.taskId)).toEqual(await store.get(first.taskId));
      expect(byId.get(second.taskId)).toEqual(await store.get(second.taskId));
      expect(await store.getMany([])).toEqual([]);
    });

    it("reads many tasks' versions in one taskVersions, each as get reads it, unknown ids left out", async (ctx) => {
      // invariant: push's periodic check compares status, lastUpdatedAt and expiry, as stored
      if (!store.taskVersions) return ctx.skip();
      const first = await created();
      const second = await created({ ttlMs: null });
      await store.requestInput(leaseOf(second), 'k', elicit('?'), T0 + 7);
      const versions = await store.taskVersions([second.taskId, 'task-unknown', first.taskId]);
      const versionOf = async (taskId: string) => {
        const task = (await store.get(taskId))!;
        const expiresAt = task.ttlMs === null ? undefined : task.createdAt + task.ttlMs;
        return { taskId, status: task.status, lastUpdatedAt: task.lastUpdatedAt, expiresAt };
      };
      expect(versions.sort((x, y) => x.taskId.localeCompare(y.taskId))).toEqual(
        (await Promise.all([first.taskId, second.taskId].map(versionOf))).sort((x, y) =>
          x.taskId.localeCompare(y.taskId),
        ),
      );
      expect(versions.find((v) => v.taskId === second.taskId)).toMatchObject({
        status: 'input_required',
        lastUpdatedAt: T0 + 7,
        expiresAt: undefined,
      });
      expect(await store.taskVersions([])).toEqual([]);
    });

    it("reads many tasks' owners in one taskOwners, unknown ids left out", async (ctx) => {
      // invariant: push's listen learns whose each named task is without reading what the tasks hold
      if (!store.taskOwners) return ctx.skip();
      const alices = await created();
      const bobs = await created({ principal: 'bob' });
      const owners = await store.taskOwners([bobs.taskId, 'task-unknown', alices.taskId]);
      expect(owners.sort((x, y) => x.taskId.localeCompare(y.taskId))).toEqual(
        [
          { taskId: alices.taskId, principal: alices.principal },
          { taskId: bobs.taskId, principal: 'bob' },
        ].sort((x, y) => x.taskId.localeCompare(y.taskId)),
      );
      expect(await store.taskOwners([])).toEqual([]);
    });

    it('answers undefined for an unknown taskId and does not call it purged', async () => {
      // invariant: an unknown id is neither a task nor a purged task
      expect(await store.get('task-never-created')).toBeUndefined();
      expect(await store.wasPurged('task-never-created', 'alice')).toBe(false);
    });

    it('rejects a second create with an existing taskId and no idempotency key, leaving the first as it was', async () => {
      // invariant: a taskId names one task; a collision is an error, never an overwrite
      const first = await created();
      await expect(
        store.create(newTask({ taskId: first.taskId, principal: 'mallory', arguments: { evil: true } })),
      ).rejects.toBeInstanceOf(Error);
      expect(await read(first.taskId)).toEqual(first);
    });
  });
}

/** One owner and one idempotency key make one task, for as long as the task is stored. */
export function describeIdempotentCreation(subject: StoreUnderTest): void {
  const { created } = subject;
  let store: TaskStore;

  describe('idempotent creation', () => {
    beforeEach(() => {
      store = subject.store;
    });

    it('returns the existing task for the same owner and key, created: false, and stores nothing new', async () => {
      // invariant: one owner and one idempotency key make one task, however often the create is retried
      const first = await created({ principal: 'alice', idempotencyKey: 'order-42', arguments: { n: 1 } });
      const retry = newTask({
        principal: 'alice',
        idempotencyKey: 'order-42',
        arguments: { n: 2 },
        createdAt: T0 + 5,
      });
      const again = await store.create(retry);
      expect(again.created).toBe(false);
      expect(again.task).toEqual(first);
      expect(await store.get(retry.taskId)).toBeUndefined();
    });

    it('returns the existing task even after it finished', async () => {
      // invariant: within the retention a retried create gets the outcome, not a second run
      const first = await created({ idempotencyKey: 'order-42' });
      await store.finish(leaseOf(first), { status: 'completed', result: { ok: true } }, T0 + 1);
      const again = await store.create(newTask({ idempotencyKey: 'order-42' }));
      expect(again.created).toBe(false);
      expect(again.task).toMatchObject({ taskId: first.taskId, status: 'completed', result: { ok: true } });
    });

    it('gives another owner with the same key a task of its own, and one owner a task per key', async () => {
      // invariant: keys are scoped to the owner, so one caller can neither see nor block another's task
      const alices = await created({ principal: 'alice', idempotencyKey: 'shared' });
      const bobs = await store.create(newTask({ principal: 'bob', idempotencyKey: 'shared' }));
      expect(bobs.created).toBe(true);
      expect(bobs.task.taskId).not.toBe(alices.taskId);
      expect(bobs.task.principal).toBe('bob');
      const alicesOther = await store.create(newTask({ principal: 'alice', idempotencyKey: 'other' }));
      expect(alicesOther.created).toBe(true);
    });

    it('creates a new task for a key whose task was purged', async () => {
      // invariant: the key's protection lasts as long as the task's row, not forever
      const first = await created({ idempotencyKey: 'order-42', ttlMs: MINUTE });
      await store.finish(leaseOf(first), { status: 'completed', result: {} }, T0 + 1);
      expect(await store.purge(T0 + 2 * MINUTE, 0)).toBe(1);
      const again = await store.create(newTask({ idempotencyKey: 'order-42', createdAt: T0 + 3 * MINUTE }));
      expect(again.created).toBe(true);
      expect(again.task.taskId).not.toBe(first.taskId);
    });
  });
}
