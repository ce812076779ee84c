/** A task as a store's `create` takes it, for tests that seed a store directly. */
import { randomUUID } from 'node:crypto';

import type { NewTask } from '../../src/server/store/taskStore.js';

/** Alice's task `job`, created `at`, held by instance-a for a minute, with a 10-minute TTL; override any field. */
export function newTask(at: number, overrides: Partial<NewTask> = {}): NewTask {
  return {
    taskId: `task-${randomUUID()}`,
    principal: 'alice',
    toolName: 'job',
    arguments: {},
    createdAt: at,
    ttlMs: 600_000,
    pollIntervalMs: 1000,
    resumable: false,
    leaseHolder: 'instance-a',
    leaseExpiresAt: at + 60_000,
    ...overrides,
  };
}
