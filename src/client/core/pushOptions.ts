/** How a TaskClient follows its tasks by push (pushFollower.ts): the options and the state, in a leaf module. */

export interface PushOptions {
  /** Set false to never subscribe: every task is polled, as against a server without push. Default true. */
  enabled?: boolean | undefined;
  /** How often a task a stream covers is still polled, as a safety net, at most. Default 30 s. */
  safetyPollMs?: number | undefined;
  /**
   * The safety polls of every task the stream covers, together, stay under this rate: with many tasks each is polled
   * less often than `safetyPollMs` (10,000 tasks at the default: each every 33 minutes), so a client waiting on them
   * costs next to nothing (at most 1% of a core for 10,000). The poll policy's `capMs` does not apply to
   * these polls: the stream carries the task. Default 5.
   */
  safetyPollsPerSecond?: number | undefined;
  /**
   * Tasks that join the set within this long share one renewal of the stream, at least. A renewal sends the state of
   * every task it carries, so the wait also grows with the set: 2 ms per task (1,000 tasks: 2 s), and a busy client
   * renews a large stream seldom, polling its newest tasks at their normal pace meanwhile. Default 50 ms.
   */
  renewDelayMs?: number | undefined;
}

/** How the tasks of one TaskClient are followed now. */
export type PushState = { mode: 'push'; tasks: number; safetyPollMs: number } | { mode: 'polling'; reason: string };
