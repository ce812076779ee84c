/** A manual clock for the scheduler: time moves only when a test says so. */
import type { SchedulerClock } from '../../src/client/index.js';

interface Timer {
  id: number;
  at: number;
  callback: () => void;
}

export class FakeClock implements SchedulerClock {
  private current: number;
  private timers: Timer[] = [];
  private nextId = 1;

  constructor(start = 1_000_000) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  setTimeout(callback: () => void, delayMs: number): unknown {
    const timer = { id: this.nextId++, at: this.current + Math.max(0, delayMs), callback };
    this.timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((timer) => timer.id !== handle);
  }

  /** Timers armed and not yet fired. */
  get pendingTimers(): number {
    return this.timers.length;
  }

  /** Move time forward by `ms`, firing due timers in order and letting promises settle after each. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    await settle();
    for (;;) {
      const due = this.timers.filter((timer) => timer.at <= target).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.timers = this.timers.filter((timer) => timer !== due);
      this.current = Math.max(this.current, due.at);
      due.callback();
      await settle();
    }
    this.current = target;
    await settle();
  }
}

/** Let every pending promise callback run. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i += 1) await new Promise<void>((resolve) => setImmediate(resolve));
}
