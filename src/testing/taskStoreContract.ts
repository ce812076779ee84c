/**
 * The one contract every TaskStore passes (docs/DESIGN.md: "Every store implementation passes one shared contract
 * suite"): SQLite and PostgreSQL here, and a store of your own (docs/server.md, "A store of your own"). A store's test
 * file calls `describeTaskStoreContract` with a factory for a fresh, empty store. Times are fixed numbers passed in;
 * nothing here sleeps.
 */
import { randomUUID } from 'node:crypto';

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import type { InputRequest, InputResponse } from '../protocol/index.js';
import type { LeaseRef, NewTask, StoredTask, TaskSignal, TaskStore } from '../server/store/taskStore.js';
import { OpenTaskLimitError, StepLimitError, StoredTaskLimitError } from '../server/store/taskStore.js';

/**
 * What a store's test file hands the contract, made afresh for every test by the factory given to
 * `describeTaskStoreContract` (in vitest's `beforeEach`).
 */
export interface TaskStoreFixture {
  /** A fresh, empty store: no task of an earlier test may be visible in it (a new file, a new schema or database). */
  store: TaskStore;
  /** Disposes of what the factory made (closes `store`, removes the file, drops the schema), after every test. */
  cleanup: () => Promise<void>;
  /**
   * A second, independent instance on the same database, where the store can have one: the checks that read a task and
   * its steps through another instance run only when it is given (skipped otherwise). The contract closes each one.
   */
  openSecond?: () => Promise<TaskStore>;
}

const T0 = 1_700_000_000_000;
const SECOND = 1000;
const MINUTE = 60 * SECOND;

function newTask(overrides: Partial<NewTask> = {}): NewTask {
  return {
    taskId: `task-${randomUUID()}`,
    principal: 'alice',
    toolName: 'slow_echo',
    arguments: { text: 'hello' },
    createdAt: T0,
    ttlMs: 10 * MINUTE,
    pollIntervalMs: 500,
    resumable: false,
    leaseHolder: 'instance-a',
    leaseExpiresAt: T0 + 30 * SECOND,
    ...overrides,
  };
}

function elicit(message: string): InputRequest {
  return { method: 'elicitation/create', params: { message, requestedSchema: { type: 'object', properties: {} } } };
}

function accept(value: string): InputResponse {
  return { action: 'accept', content: { value } };
}

function leaseOf(task: StoredTask): LeaseRef {
  return { taskId: task.taskId, fence: task.fence };
}

/**
 * Declares the contract's tests (a vitest `describe` named `TaskStore contract: ${name}`) in the calling test file.
 * `makeStore` runs before every test and must answer a fresh, empty store; the contract calls `cleanup` after it.
 */
export function describeTaskStoreContract(name: string, makeStore: () => Promise<TaskStoreFixture>): void {
  describe(`TaskStore contract: ${name}`, () => {
    let fixture: TaskStoreFixture;
    let store: TaskStore;
    const extraStores: TaskStore[] = [];

    beforeEach(async () => {
      fixture = await makeStore();
      store = fixture.store;
    });

    afterEach(async () => {
      for (const extra of extraStores.splice(0)) await extra.close();
      await fixture.cleanup();
    });

    /** Creates a task and returns it as stored. */
    async function created(overrides: Partial<NewTask> = {}): Promise<StoredTask> {
      const { task, created: wasCreated } = await store.create(newTask(overrides));
      expect(wasCreated).toBe(true);
      return task;
    }

    /** Reads a task that must exist. */
    async function read(taskId: string, from: TaskStore = store): Promise<StoredTask> {
      const task = await from.get(taskId);
      expect(task, `task ${taskId} should exist`).toBeDefined();
      return task!;
    }

    describe('creation', () => {
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
        if (!fixture.openSecond) return ctx.skip();
        const second = await fixture.openSecond();
        extraStores.push(second);
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
            traceContext:
              i % 6 === 0 ? { traceparent: `00-${'a'.repeat(31)}${i % 10}-${'b'.repeat(16)}-01` } : undefined,
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

    describe('status messages', () => {
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

    describe('terminal immutability', () => {
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
        expect(await store.finish(leaseOf(a), { status: 'failed', error, statusMessage: 'crashed' }, T0 + 1)).toBe(
          true,
        );
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

    describe('fencing', () => {
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

    describe('durable steps', () => {
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
        if (!fixture.openSecond) return ctx.skip();
        const second = await fixture.openSecond();
        extraStores.push(second);
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

    describe('requestInput', () => {
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

    describe('answerInputs', () => {
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

    describe('requestCancel', () => {
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

    describe('signals', () => {
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

    describe('leases', () => {
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

    describe('idempotent creation', () => {
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

    describe('expiry', () => {
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

    describe('purge', () => {
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

    describe('lifecycle', () => {
      it('rejects with an Error after close, and closing twice is harmless', async () => {
        // invariant: storage errors surface as thrown Errors (the runtime maps them to -32603), never as made-up data
        const task = await created();
        await store.close();
        await expect(store.get(task.taskId)).rejects.toBeInstanceOf(Error);
        await expect(store.create(newTask())).rejects.toBeInstanceOf(Error);
        await expect(store.close()).resolves.toBeUndefined();
      });
    });
  });
}
