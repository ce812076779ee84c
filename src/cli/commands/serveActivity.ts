/**
 * `closeout serve`'s activity log (TaskServerOptions.onActivity): one line on stderr per task event that matters to an
 * operator, as text for people or as JSON for log collectors. Ids, tools, statuses, durations and counts only: never
 * an argument or a result (they may be secret).
 */
import type { TaskActivity } from '../../server/index.js';

export type LogFormat = 'text' | 'json';

/** The log line of `activity`, or undefined for what text leaves out. */
export function activityLine(activity: TaskActivity, format: LogFormat, at: Date = new Date()): string {
  if (format === 'json') return JSON.stringify({ at: at.toISOString(), event: `task.${activity.type}`, ...activity });
  switch (activity.type) {
    case 'created':
      return `closeout serve: task ${activity.taskId} created (${activity.tool})`;
    case 'finished':
      return `closeout serve: task ${activity.taskId} ${activity.status} (${activity.tool}, attempt ${activity.attempt}, ${seconds(activity.durationMs)} after creation)`;
    case 'taken-over':
      return `closeout serve: task ${activity.taskId} taken over (${activity.tool}): ${TAKEOVER[activity.outcome]}`;
    case 'lease-unrenewed':
      return `closeout serve: task ${activity.taskId} stopped here (${activity.tool}, attempt ${activity.attempt}): its lease could not be renewed in time, so another instance may take it over`;
    case 'expired':
      return `closeout serve: ${activity.count} task${activity.count === 1 ? '' : 's'} expired (past their TTL)`;
    case 'purged':
      return `closeout serve: ${activity.count} finished task${activity.count === 1 ? '' : 's'} purged (retention over)`;
  }
}

const TAKEOVER: Record<Extract<TaskActivity, { type: 'taken-over' }>['outcome'], string> = {
  rerun: 're-run here (resumable)',
  interrupted: 'failed as interrupted (not resumable)',
  cancelled: 'cancelled, as its client asked',
  continued: "this instance's own run goes on",
};

function seconds(ms: number): string {
  return ms < 1000 ? `${Math.max(0, Math.round(ms))}ms` : `${(ms / 1000).toFixed(1)}s`;
}

/**
 * The line at start: the open tasks the store holds (working or waiting for input), which this instance takes up with
 * the others as their holders' leases run out. Undefined when the store cannot count (a custom store).
 */
export function startLine(openTasks: number, format: LogFormat, at: Date = new Date()): string {
  if (format === 'json') return JSON.stringify({ at: at.toISOString(), event: 'serve.started', openTasks });
  return openTasks === 0
    ? 'closeout serve: no open task in the store'
    : `closeout serve: ${plural(openTasks, 'open task')} in the store: those whose instance is gone are taken up as their leases run out`;
}

/** The line at shutdown: the tasks this instance was running, handed back to the store for the next instance. */
export function stopLine(handedBack: number, format: LogFormat, at: Date = new Date()): string {
  if (format === 'json') return JSON.stringify({ at: at.toISOString(), event: 'serve.stopped', handedBack });
  return handedBack === 0
    ? 'closeout serve: stopped, no task was running'
    : `closeout serve: stopped, ${plural(handedBack, 'running task')} handed back to the store for the next instance`;
}

function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
