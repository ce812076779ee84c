/**
 * The one contract every TaskStore passes (docs/DESIGN.md: "Every store implementation passes one shared contract
 * suite"): SQLite and PostgreSQL here, and a store of your own (docs/server.md, "A store of your own"). A store's test
 * file calls `describeTaskStoreContract` with a factory for a fresh, empty store. Times are fixed numbers passed in;
 * nothing here sleeps. The cases are in taskStore/, one file per group; this file makes the store for each test, runs
 * the groups in order, and closes it.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { NewTask, StoredTask, TaskStore } from '../server/store/taskStore.js';
import { describeCreation, describeIdempotentCreation } from './taskStore/creation.js';
import { describeAnswerInputs, describeRequestInput } from './taskStore/input.js';
import { describeFencing, describeLeases } from './taskStore/leases.js';
import { describeExpiry, describePurge } from './taskStore/retention.js';
import { describeRequestCancel, describeSignals } from './taskStore/signals.js';
import { describeStatusMessages, describeTerminalImmutability } from './taskStore/statusWrites.js';
import { describeDurableSteps } from './taskStore/steps.js';
import type { StoreUnderTest } from './taskStore/storeUnderTest.js';
import { newTask } from './taskStore/storeUnderTest.js';

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

    const subject: StoreUnderTest = {
      get store() {
        return store;
      },
      created: async (overrides: Partial<NewTask> = {}): Promise<StoredTask> => {
        const { task, created: wasCreated } = await store.create(newTask(overrides));
        expect(wasCreated).toBe(true);
        return task;
      },
      read: async (taskId: string, from: TaskStore = store): Promise<StoredTask> => {
        const task = await from.get(taskId);
        expect(task, `task ${taskId} should exist`).toBeDefined();
        return task!;
      },
      secondInstance: async () => {
        if (!fixture.openSecond) return undefined;
        const second = await fixture.openSecond();
        extraStores.push(second);
        return second;
      },
    };

    describeCreation(subject);
    describeStatusMessages(subject);
    describeTerminalImmutability(subject);
    describeFencing(subject);
    describeDurableSteps(subject);
    describeRequestInput(subject);
    describeAnswerInputs(subject);
    describeRequestCancel(subject);
    describeSignals(subject);
    describeLeases(subject);
    describeIdempotentCreation(subject);
    describeExpiry(subject);
    describePurge(subject);

    describe('lifecycle', () => {
      it('rejects with an Error after close, and closing twice is harmless', async () => {
        // invariant: storage errors surface as thrown Errors (the runtime maps them to -32603), never as made-up data
        const task = await subject.created();
        await store.close();
        await expect(store.get(task.taskId)).rejects.toBeInstanceOf(Error);
        await expect(store.create(newTask())).rejects.toBeInstanceOf(Error);
        await expect(store.close()).resolves.toBeUndefined();
      });
    });
  });
}
