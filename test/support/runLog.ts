/**
 * What the demo tools record of their runs (`CLOSEOUT_RUN_LOG`, src/demo/demoTools.ts), and waiting for a task to
 * close out over the wire: for the tests that count how often, and where, a task's handler ran.
 */
import { existsSync, readFileSync } from 'node:fs';

import { rpc } from './rpc.js';
import { waitFor } from './waitFor.js';

/** One handler start: its attempt, process, instance (CLOSEOUT_RUN_INSTANCE, else the pid) and time (ms). */
export interface RunEntry {
  attempt: number;
  pid: number;
  instance: string;
  at: number;
}

/** Every handler start of `taskId` in the run log at `runLog`. */
export function runsOf(runLog: string, taskId: string): RunEntry[] {
  if (!existsSync(runLog)) return [];
  return readFileSync(runLog, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as RunEntry & { taskId: string })
    .filter((run) => run.taskId === taskId);
}

/** How many handler starts, of any task, the run log at `runLog` holds. */
export function handlerStarts(runLog: string): number {
  return existsSync(runLog) ? readFileSync(runLog, 'utf8').trim().split('\n').filter(Boolean).length : 0;
}

/** The task once `tasks/get` at `url` says it ended (completed, failed or cancelled). */
export async function settled(url: string, taskId: string, timeoutMs: number): Promise<Record<string, unknown>> {
  return waitFor(
    `task ${taskId} to close out`,
    async () => {
      const r = await rpc(url, 'tasks/get', { taskId });
      const status = String(r.result?.['status']);
      return ['completed', 'failed', 'cancelled'].includes(status) ? r.result! : undefined;
    },
    timeoutMs,
    50,
  );
}
