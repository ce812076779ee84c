/**
 * The exit codes of every `closeout` command, in one place so they mean the same thing everywhere (docs/cli.md, "Exit
 * codes"). For `call` and `resume` the code is the task's close-out; other commands use 0 and 1 only, except where
 * their help says otherwise.
 */
import type { TaskOutcome } from '../client/index.js';

export const EXIT = {
  /** The command did what it was asked; a followed task completed. */
  ok: 0,
  /** Bad input or an unusable environment (URL, server, tool, arguments, taskId, ledger): nothing was changed. */
  usage: 1,
  /** The task failed, its result is a tool error (`isError: true`), or the server refused the call. */
  failed: 2,
  /** The task was cancelled. */
  cancelled: 3,
  /** The handle is no longer usable (expired, -32602), or the call's outcome is unknown. */
  expired: 4,
  /** The task needs input this process cannot give (no terminal, no answer flags); it goes on, detached. */
  needsInput: 5,
  /** Ctrl-C, or stdout closed, while following: detached, the task goes on and `closeout resume` finds it. */
  interrupted: 130,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** Why a process stopped following a task that is still open. */
export type DetachReason = 'interrupted' | 'needs-input' | 'requested';

/** The exit code a close-out stands for. */
export function exitCodeOf(outcome: TaskOutcome, detachReason: DetachReason = 'requested'): ExitCode {
  switch (outcome.kind) {
    case 'completed':
      return outcome.result.isError === true ? EXIT.failed : EXIT.ok;
    case 'failed':
      return EXIT.failed;
    case 'cancelled':
      return EXIT.cancelled;
    case 'expired':
      return EXIT.expired;
    case 'detached':
      return detachReason === 'interrupted'
        ? EXIT.interrupted
        : detachReason === 'needs-input'
          ? EXIT.needsInput
          : EXIT.ok;
  }
}

/** Several tasks: the largest code wins, so any task that did not complete makes the command fail. */
export function worstExitCode(codes: readonly number[]): number {
  return codes.reduce((worst, code) => Math.max(worst, code), EXIT.ok);
}
