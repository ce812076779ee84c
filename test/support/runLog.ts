/**
 * What the demo tools record of their runs (`CLOSEOUT_RUN_LOG`, src/demo/demoTools.ts), and waiting for a task to
 * close out over the wire: for the tests that count how often, and where, a task's handler ran.
 */
import { existsSync, readFileSync } from 'node:fs';

import { rpc } from './rpc.js';
import { waitFor } from './waitFor.js';

/** Every handler start of `taskId` in the run log at `runLog`, with its time (Date.now of the process that ran it). */
export function runsOf(runLog: string, taskId: string): Array<{ attempt: number; pid: number; at: number }> {
  if (!existsSync(runLog)) return [];
  return readFileSync(runLog, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { taskId: string; attempt: number; pid: number; at: number })
    .filter((run) => run.taskId === taskId);
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
