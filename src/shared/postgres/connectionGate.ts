/**
 * At most `size` calls use a pool at once; the others wait here, in order, for as long as it takes. The pool's own
 * queue would fail a call that waited longer than its connection timeout, though the database answered all along
 * (RESULTS.md section 14: 10,000 tasks, 40 calls and polls in flight on 5 connections); behind this gate the pool
 * never queues, and its timeout measures only a connection that cannot be made.
 */
export class ConnectionGate {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(size: number) {
    this.free = size;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free -= 1;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      // the slot goes straight to the next in line, or back to the free ones
      const next = this.waiting.shift();
      if (next) next();
      else this.free += 1;
    }
  }
}
