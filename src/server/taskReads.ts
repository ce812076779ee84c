/**
 * What push (taskPush.ts) reads through the TaskServer: the reads a client's `tasks/get` makes, and the change feed.
 * Its own leaf module so that the push module and the server it serves do not import each other.
 */
import type { DetailedTask } from '../protocol/index.js';
import type { StoredTask, TaskOwner, TaskVersion } from './store/taskStore.js';

export interface TaskReads {
  /** A stored task as `tasks/get` answers it, expired on read once past its TTL. */
  answerOf(task: StoredTask, principal: string): Promise<DetailedTask>;
  /** The stored tasks of these ids that exist. */
  readTasks(taskIds: string[]): Promise<StoredTask[]>;
  /** Whose each stored task of these ids is, without reading what the tasks hold. */
  readOwners(taskIds: string[]): Promise<TaskOwner[]>;
  /** What tells a change of these tasks apart, and whether each is past its TTL. */
  readVersions(taskIds: string[]): Promise<Array<TaskVersion & { overdue: boolean }>>;
  /** Told the id of every task whose `tasks/get` answer may have changed; returns the unsubscribe. */
  onTaskChange(listener: (taskId: string) => void): () => void;
}
