/**
 * One scheduler for every open task (docs/DESIGN.md, client step 2): a min-heap of due times and a single timer, not a
 * timer per task, with a bound on polls in flight. It decides only *when* a task is polled; what a poll does is the
 * caller's `poll` function, which reports how it went.
 *
 * Policy (docs/REQUIREMENTS.md S5, S7, S16):
 * - after an answer, the next poll is at the server's `pollIntervalMs` (which may change on every answer), clamped
 *   to [floorMs, capMs], plus up to `jitterRatio` of it on top (never earlier than the server asked, never above
 *   the cap);
 * - after a transport failure, exponential backoff with jitter; a `Retry-After` from the server is a lower bound;
 * - two polls of one task are never closer than `floorMs`;
 * - due times are rounded up to a `tickMs` grid, so polls due close together share one wake-up of the process (at
 *   10,000 open tasks this saves about a third of the client's CPU), and a poll 300 ticks away or more (30 s at the
 *   default tick) to ten ticks, which adds at most a thirtieth of its wait (`pollGridMs`); a poll is never earlier
 *   than asked;
 * - a poll that reports `done` (terminal, expired, lost lease) removes the task: no tail polls.
 *
 * The clock and the random source are injected so the policy is tested with a fake clock.
 */

/** What the scheduler needs of time. */
export interface SchedulerClock {
  now(): number;
  setTimeout(callback: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const SYSTEM_CLOCK: SchedulerClock = {
  now: () => Date.now(),
  // a pending poll keeps the process alive, as an open request would: `await handle.result()` must not exit early
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * The system clock for scheduling and for how long a task has been seen open: the wall time when this process started
 * plus the monotonic time since, so a step of the wall clock (NTP, a VM restored) neither stalls nor rushes a poll and
 * never ages a task (docs/DESIGN.md, rule 2). Ledger times and leases are on the ledger's clock (Ledger.now: the
 * host's wall clock for SQLite, the database's for PostgreSQL).
 */
export const STEADY_CLOCK: SchedulerClock = {
  now: () => performance.timeOrigin + performance.now(),
  setTimeout: SYSTEM_CLOCK.setTimeout,
  clearTimeout: SYSTEM_CLOCK.clearTimeout,
};

export interface PollPolicy {
  /** Never poll one task more often than this, whatever the server suggests. */
  floorMs: number;
  /** Never wait longer than this between two polls of an open task. */
  capMs: number;
  /** The interval when the server gave no `pollIntervalMs`. */
  defaultIntervalMs: number;
  /** Up to this fraction of the interval is added at random, so many clients do not poll in lockstep. */
  jitterRatio: number;
  /** First retry delay after a transport failure; doubles with each consecutive failure. */
  backoffBaseMs: number;
  /** Largest backoff delay. */
  backoffCapMs: number;
  /** Largest `Retry-After` honoured; a larger one is clamped to this. */
  maxRetryAfterMs: number;
  /** Polls in flight at once, over all tasks. */
  maxConcurrentPolls: number;
  /**
   * Due times are rounded up to a multiple of this, so nearby polls share a wake-up; those 300 ticks away or more, to
   * a multiple of ten ticks (`pollGridMs`). 0: exact times.
   */
  tickMs: number;
}

/**
 * The grid a poll due `delayMs` from now is rounded up to: `tickMs`, or ten ticks once that adds at most a thirtieth of
 * the wait. Long waits are where many open tasks sit (10,000 tasks at `pollIntervalMs` 30 s), and the polls a process
 * sends together cost it less each than the same polls spread over ten wake-ups (bench/RESULTS.md, sections 4 and 22).
 */
export function pollGridMs(delayMs: number, tickMs: number): number {
  if (tickMs <= 0) return 0;
  return delayMs >= 300 * tickMs ? 10 * tickMs : tickMs;
}

export const DEFAULT_POLL_POLICY: PollPolicy = {
  floorMs: 250,
  capMs: 60_000,
  defaultIntervalMs: 1_000,
  jitterRatio: 0.1,
  backoffBaseMs: 500,
  backoffCapMs: 60_000,
  maxRetryAfterMs: 600_000,
  maxConcurrentPolls: 8,
  tickMs: 100,
};

/** How one poll went. */
export type PollVerdict =
  /** The server answered; the task is still open. */
  | {
      kind: 'continue';
      pollIntervalMs?: number | undefined;
      /** A safety poll of a task a push stream carries: its interval may pass `capMs` (see PushOptions). */
      safety?: boolean | undefined;
    }
  /** No usable answer (transport failure, bad server output): back off, never a task failure (S16). */
  | { kind: 'retry'; retryAfterMs?: number | undefined }
  /** Nothing more to poll: terminal, expired, or no longer ours. */
  | { kind: 'done' };

/** Delay before the next poll after an answer that suggested `pollIntervalMs` (S5). */
export function nextPollDelay(
  pollIntervalMs: number | undefined,
  policy: PollPolicy,
  random: () => number,
  safety = false,
): number {
  const suggested = pollIntervalMs ?? policy.defaultIntervalMs;
  // a safety poll of a pushed task is not held to the cap: the stream, not the poll, carries the task
  const capMs = safety ? Infinity : policy.capMs;
  const base = Math.min(capMs, Math.max(policy.floorMs, suggested));
  // jitter only adds: polling earlier than the server asked is what its rate limits punish. One product, not base +
  // base * jitter: with random() just under 1 the sum could round one ulp past base * (1 + jitterRatio)
  return Math.min(capMs, base * (1 + policy.jitterRatio * random()));
}

/** Delay before retrying after the `failures`-th consecutive failure (1-based). */
export function backoffDelay(
  failures: number,
  retryAfterMs: number | undefined,
  policy: PollPolicy,
  random: () => number,
): number {
  const exponential = Math.min(policy.backoffCapMs, policy.backoffBaseMs * 2 ** Math.max(0, failures - 1));
  // "equal jitter": at least half the exponential delay, so retries still spread out but never collapse to zero
  const jittered = exponential / 2 + (exponential / 2) * random();
  let delay = Math.max(policy.floorMs, jittered);
  if (retryAfterMs !== undefined) {
    const serverMinimum = Math.min(policy.maxRetryAfterMs, Math.max(0, retryAfterMs));
    delay = Math.max(delay, serverMinimum + serverMinimum * policy.jitterRatio * random());
  }
  return delay;
}

interface Entry {
  key: string;
  /** When the entry is due; undefined while a poll is in flight. */
  dueAt: number | undefined;
  /** Bumped on every reschedule: heap nodes carrying an older generation are stale and skipped. */
  generation: number;
  inFlight: boolean;
  /** A reschedule asked for while a poll was in flight; applied when it ends if earlier. */
  requestedAt: number | undefined;
  lastPollStartedAt: number | undefined;
  consecutiveFailures: number;
}

interface HeapNode {
  dueAt: number;
  key: string;
  generation: number;
  /** Insertion order breaks ties, so equal due times run first-come first-served. */
  seq: number;
}

export interface PollSchedulerOptions {
  poll: (key: string) => Promise<PollVerdict>;
  policy?: Partial<PollPolicy> | undefined;
  clock?: SchedulerClock | undefined;
  random?: (() => number) | undefined;
  /** Told whenever a key's next poll time is set (undefined: no further poll). */
  onScheduled?: ((key: string, nextPollAt: number | undefined) => void) | undefined;
  /** Told when a `poll` function threw; the scheduler treats it as a failure and backs off. */
  onPollError?: ((key: string, error: unknown) => void) | undefined;
  /**
   * Told at a wake-up which keys just fell due, before any of their polls starts: what every one of those polls needs
   * can be read once for all of them (following.ts, `readLeasesAhead`).
   */
  onDue?: ((keys: readonly string[]) => void) | undefined;
}

export class PollScheduler {
  readonly policy: PollPolicy;
  private readonly clock: SchedulerClock;
  private readonly random: () => number;
  private readonly entries = new Map<string, Entry>();
  private readonly heap: HeapNode[] = [];
  private readonly ready: string[] = [];
  private readonly idleWaiters: Array<() => void> = [];
  private timer: unknown;
  private timerDueAt: number | undefined;
  private inFlightCount = 0;
  private seq = 0;
  private stopped = false;

  constructor(private readonly options: PollSchedulerOptions) {
    this.policy = { ...DEFAULT_POLL_POLICY, ...options.policy };
    if (this.policy.floorMs < 0 || this.policy.capMs < this.policy.floorMs) {
      throw new RangeError(
        `poll policy needs 0 <= floorMs <= capMs (got ${this.policy.floorMs}, ${this.policy.capMs})`,
      );
    }
    if (this.policy.maxConcurrentPolls < 1) throw new RangeError('poll policy needs maxConcurrentPolls >= 1');
    if (!(this.policy.tickMs >= 0)) throw new RangeError(`poll policy needs tickMs >= 0 (got ${this.policy.tickMs})`);
    this.clock = options.clock ?? SYSTEM_CLOCK;
    this.random = options.random ?? Math.random;
  }

  /** Number of tasks followed (scheduled or in flight). */
  get size(): number {
    return this.entries.size;
  }

  get inFlight(): number {
    return this.inFlightCount;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** When the key is due next, if it is waiting. */
  dueAt(key: string): number | undefined {
    return this.entries.get(key)?.dueAt;
  }

  /**
   * Follow `key`, polling it at `at` (default: now) but never sooner than `floorMs` after its previous poll.
   * Rescheduling a key that is waiting moves it; for a key in flight the time applies after that poll if earlier.
   */
  schedule(key: string, at: number = this.clock.now()): void {
    if (this.stopped) return;
    let entry = this.entries.get(key);
    if (!entry) {
      entry = {
        key,
        dueAt: undefined,
        generation: 0,
        inFlight: false,
        requestedAt: undefined,
        lastPollStartedAt: undefined,
        consecutiveFailures: 0,
      };
      this.entries.set(key, entry);
    }
    if (entry.inFlight) {
      entry.requestedAt = entry.requestedAt === undefined ? at : Math.min(entry.requestedAt, at);
      return;
    }
    this.enqueue(entry, at);
  }

  /** Stop following `key`. A poll in flight finishes, but nothing is scheduled after it. */
  remove(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    entry.generation += 1;
    if (!entry.inFlight) this.options.onScheduled?.(key, undefined);
  }

  /** Stop everything: no timer, no new polls. Polls in flight finish on their own. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerDueAt = undefined;
    this.entries.clear();
    this.heap.length = 0;
    this.ready.length = 0;
    this.settleIdle();
  }

  /** Resolves once no poll is in flight (for orderly shutdown and tests). */
  whenIdle(): Promise<void> {
    if (this.inFlightCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private enqueue(entry: Entry, at: number): void {
    const earliest = entry.lastPollStartedAt === undefined ? at : entry.lastPollStartedAt + this.policy.floorMs;
    const asked = Math.max(at, earliest);
    const grid = pollGridMs(asked - this.clock.now(), this.policy.tickMs);
    const dueAt = grid > 0 ? Math.ceil(asked / grid) * grid : asked;
    entry.generation += 1;
    entry.dueAt = dueAt;
    this.push({ dueAt, key: entry.key, generation: entry.generation, seq: this.seq++ });
    this.options.onScheduled?.(entry.key, dueAt);
    this.arm();
  }

  private arm(): void {
    this.dropStaleTop();
    const top = this.heap[0];
    if (top === undefined || this.stopped) return;
    if (this.timer !== undefined && this.timerDueAt !== undefined && this.timerDueAt <= top.dueAt) return;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timerDueAt = top.dueAt;
    this.timer = this.clock.setTimeout(() => this.onTimer(), Math.max(0, top.dueAt - this.clock.now()));
  }

  private onTimer(): void {
    this.timer = undefined;
    this.timerDueAt = undefined;
    if (this.stopped) return;
    const now = this.clock.now();
    const due: string[] = [];
    for (;;) {
      this.dropStaleTop();
      const top = this.heap[0];
      if (top === undefined || top.dueAt > now) break;
      this.pop();
      const entry = this.entries.get(top.key);
      if (!entry) continue;
      entry.dueAt = undefined;
      due.push(top.key);
    }
    if (due.length > 0) {
      this.options.onDue?.(due);
      for (const key of due) this.ready.push(key);
    }
    this.pump();
    this.arm();
  }

  private pump(): void {
    while (this.inFlightCount < this.policy.maxConcurrentPolls && this.ready.length > 0) {
      const key = this.ready.shift() as string;
      const entry = this.entries.get(key);
      if (!entry || entry.inFlight || entry.dueAt !== undefined) continue;
      this.start(entry);
    }
  }

  private start(entry: Entry): void {
    entry.inFlight = true;
    entry.lastPollStartedAt = this.clock.now();
    this.inFlightCount += 1;
    let outcome: Promise<PollVerdict>;
    try {
      outcome = this.options.poll(entry.key);
    } catch (error) {
      outcome = Promise.reject(error);
    }
    outcome.then(
      (result) => this.finish(entry, result),
      (error: unknown) => {
        this.options.onPollError?.(entry.key, error);
        this.finish(entry, { kind: 'retry' });
      },
    );
  }

  private finish(entry: Entry, outcome: PollVerdict): void {
    this.inFlightCount -= 1;
    entry.inFlight = false;
    const requestedAt = entry.requestedAt;
    entry.requestedAt = undefined;
    const current = this.entries.get(entry.key) === entry;
    if (this.stopped || !current) {
      if (!this.stopped && !current) this.options.onScheduled?.(entry.key, undefined);
    } else if (outcome.kind === 'done') {
      this.entries.delete(entry.key);
      this.options.onScheduled?.(entry.key, undefined);
    } else {
      let delay: number;
      if (outcome.kind === 'continue') {
        entry.consecutiveFailures = 0;
        delay = nextPollDelay(outcome.pollIntervalMs, this.policy, this.random, outcome.safety);
      } else {
        entry.consecutiveFailures += 1;
        delay = backoffDelay(entry.consecutiveFailures, outcome.retryAfterMs, this.policy, this.random);
      }
      let at = this.clock.now() + delay;
      // an explicit earlier request (e.g. an input answer was just sent) wins over the policy, floor permitting
      if (requestedAt !== undefined && requestedAt < at && outcome.kind === 'continue') at = requestedAt;
      this.enqueue(entry, at);
    }
    this.pump();
    this.arm();
    if (this.inFlightCount === 0) this.settleIdle();
  }

  private settleIdle(): void {
    if (this.inFlightCount !== 0) return;
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }

  private dropStaleTop(): void {
    for (;;) {
      const top = this.heap[0];
      if (top === undefined) return;
      const entry = this.entries.get(top.key);
      if (entry && entry.generation === top.generation && !entry.inFlight) return;
      this.pop();
    }
  }

  private push(node: HeapNode): void {
    const heap = this.heap;
    heap.push(node);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i] as HeapNode, heap[parent] as HeapNode)) break;
      [heap[i], heap[parent]] = [heap[parent] as HeapNode, heap[i] as HeapNode];
      i = parent;
    }
  }

  private pop(): HeapNode | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < heap.length && before(heap[left] as HeapNode, heap[smallest] as HeapNode)) smallest = left;
        if (right < heap.length && before(heap[right] as HeapNode, heap[smallest] as HeapNode)) smallest = right;
        if (smallest === i) break;
        [heap[i], heap[smallest]] = [heap[smallest] as HeapNode, heap[i] as HeapNode];
        i = smallest;
      }
    }
    return top;
  }
}

function before(a: HeapNode, b: HeapNode): boolean {
  return a.dueAt < b.dueAt || (a.dueAt === b.dueAt && a.seq < b.seq);
}
