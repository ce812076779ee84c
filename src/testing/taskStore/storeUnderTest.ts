/**
 * What every group of the task-store contract works with: the store of the running test, made afresh before each
 * test by the factory given to `describeTaskStoreContract`, and the times and makers its cases share.
 */
import { randomUUID } from 'node:crypto';

import type { InputRequest, InputResponse } from '../../protocol/index.js';
import type { LeaseRef, NewTask, StoredTask, TaskStore } from '../../server/store/taskStore.js';

/** The store of the running test, as the contract's groups see it. */
export interface StoreUnderTest {
  /** The fresh, empty store of the running test. */
  readonly store: TaskStore;
  /** Creates a task and returns it as stored. */
  readonly created: (overrides?: Partial<NewTask>) => Promise<StoredTask>;
  /** Reads a task that must exist. */
  readonly read: (taskId: string, from?: TaskStore) => Promise<StoredTask>;
  /** A second instance on the same database, closed after the test; undefined where the fixture can open none. */
  readonly secondInstance: () => Promise<TaskStore | undefined>;
}

export const T0 = 1_700_000_000_000;
export const SECOND = 1000;
export const MINUTE = 60 * SECOND;

export function newTask(overrides: Partial<NewTask> = {}): NewTask {
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

export function elicit(message: string): InputRequest {
  return { method: 'elicitation/create', params: { message, requestedSchema: { type: 'object', properties: {} } } };
}

export function accept(value: string): InputResponse {
  return { action: 'accept', content: { value } };
}

export function leaseOf(task: StoredTask): LeaseRef {
  return { taskId: task.taskId, fence: task.fence };
}
