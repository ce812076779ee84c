/**
 * What a TaskServer is made with and what it tells (taskServer.ts): its options, a registered tool, the activity an
 * operator's log receives. A leaf module: the parts of the runtime (taskRuns.ts, leaseLoop.ts) name these types without
 * importing the TaskServer.
 */
import type * as z from 'zod/v4';

import type { JsonObject } from '../protocol/index.js';
import type { TaskLimits } from './limits.js';
import type { TaskStore } from './store/taskStore.js';
import type { TaskPushOptions } from './taskPush.js';
import type { PollIntervalPolicy, TaskHandler, TaskSupport, TaskToolConfig } from './taskTool.js';
import type { TelemetryOptions } from './telemetry.js';

/**
 * How long a server's lease holds without renewal unless `leaseMs` says otherwise (TaskServer, `closeout serve`): a
 * store stall shorter than 14 s (about half a lease) stops no run (docs/DESIGN.md, "Rules learned in the field", 13),
 * and a dead holder's tasks are taken up to two leases after its death, unless the kernel proves it dead.
 */
export const DEFAULT_LEASE_MS = 30_000;

/** The store, timings, and the resource limits of limits.ts (docs/operations.md, "Limits"); every limit has a default. */
export interface TaskServerOptions extends Partial<TaskLimits> {
  store: TaskStore;
  /**
   * How long a lease holds without renewal. A dead instance's tasks are taken over up to two leases after its death (at
   * once when the kernel proves it dead). Default 30 s (DEFAULT_LEASE_MS).
   */
  leaseMs?: number;
  /** How often leases are renewed and the sweeps (expiry, purge, orphans, fallback signals) run. Default leaseMs/3. */
  sweepIntervalMs?: number;
  /** How long a terminal task is kept past `createdAt + ttlMs` before it is purged. Default one hour. */
  retentionMs?: number;
  /**
   * How long a terminal task of a tool with `ttlMs: null` is kept after it finished before it is purged, so that no
   * task is kept for ever. Default seven days.
   */
  unlimitedRetentionMs?: number;
  /** How long a cancelled handler may take to stop before the task is marked cancelled anyway. Default 5 s. */
  cancelGraceMs?: number;
  /** Identity of this instance in leases. Default `host:pid:random`. */
  instanceId?: string;
  /** Called with errors that have no caller to go to (a failed sweep, a store error in a background write). */
  onError?: (error: Error) => void;
  /**
   * Told of each task event an operator cares about: created, finished (status, how long since creation), taken over
   * after a restart or from another instance (and what became of it), expired, purged. Never arguments or results.
   * `closeout serve` logs them.
   */
  onActivity?: (activity: TaskActivity) => void;
  /** Push streams (`subscriptions/listen` with `notifications.taskIds`): buffer, periodic check, keep-alive. */
  push?: TaskPushOptions;
  /** The clock, for tests. Default: the store's (TaskStore.now) where it has one, else the host's. */
  now?: () => number;
  /** Where traces and metrics go (docs/operations.md, "Observability"). Default: the OpenTelemetry API's global providers. */
  telemetry?: TelemetryOptions;
}

export interface RegisteredTaskTool {
  name: string;
  config: TaskToolConfig<z.ZodType<JsonObject> | undefined>;
  support: TaskSupport;
  ttlMs: number | null;
  pollInterval: PollIntervalPolicy;
  resumable: boolean;
  handler: TaskHandler<JsonObject>;
}

/** A task event for an operator's log (TaskServerOptions.onActivity): ids, tools, statuses and counts only. */
export type TaskActivity =
  | { type: 'created'; taskId: string; tool: string }
  | {
      type: 'finished';
      taskId: string;
      tool: string;
      status: 'completed' | 'failed' | 'cancelled';
      attempt: number;
      /** Since the task was created. */
      durationMs: number;
    }
  | {
      type: 'taken-over';
      taskId: string;
      tool: string;
      /** `rerun`: a resumable task runs again here; `interrupted`: failed as interrupted; `continued`: this instance's own. */
      outcome: 'rerun' | 'interrupted' | 'cancelled' | 'continued';
    }
  | {
      /**
       * This instance stopped its run: the lease could not be renewed in time (the store did not answer it), so another
       * instance may take the task (docs/DESIGN.md, "Rules learned in the field", 13).
       */
      type: 'lease-unrenewed';
      taskId: string;
      tool: string;
      attempt: number;
    }
  | { type: 'expired'; count: number }
  | { type: 'purged'; count: number };

export const INTERRUPTED_MESSAGE = 'Task interrupted by a server restart before it finished';
