/**
 * How a command finds a task from what a person typed, the same for the ledger's commands and the server store's:
 * the id itself, or a prefix of it as people copy them, of at least MIN_TASK_ID_PREFIX characters (a shorter one
 * too easily names a task that was not meant), and the same words when neither finds one task.
 */
import { CliError } from './cliError.js';

export const MIN_TASK_ID_PREFIX = 6;

/** Whether `ref` is long enough to stand for the one taskId that starts with it. */
export function isTaskIdPrefix(ref: string): boolean {
  return ref.length >= MIN_TASK_ID_PREFIX;
}

/**
 * Why `ref` names no task: too short a prefix, a prefix `starting` (more than one) tasks share, or none at all.
 * `where` names the ledger or store; `lister` is the command that lists its tasks.
 */
export function noSuchTask(ref: string, starting: number, where: string, lister: string): CliError {
  if (!isTaskIdPrefix(ref)) {
    return new CliError(
      `${ref} is too short a prefix of a taskId: give at least ${MIN_TASK_ID_PREFIX} of its characters (\`${lister}\` lists them)`,
    );
  }
  if (starting > 1) {
    return new CliError(
      `several tasks in ${where} start with ${ref}: give more of the taskId (\`${lister}\` lists them)`,
    );
  }
  return new CliError(`no task ${ref} in ${where}: list them with \`${lister}\``);
}
