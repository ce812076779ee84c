/**
 * The records this process follows now (docs/DESIGN.md, "The task's life on the client"): one live handle per record,
 * and how long this process has seen each open. Following (following.ts) adds and drops them; submission and the lease
 * keeper only look.
 */
import type { TaskRecord } from '../ledger/ledger.js';
import type { TaskHandle } from '../taskHandle.js';

export class LiveHandles {
  private readonly handles = new Map<string, TaskHandle>();
  /** Per followed record: when (steady clock) this process started counting its age, and the age it had then. */
  private readonly ages = new Map<string, { since: number; ageMs: number }>();

  get(recordId: string): TaskHandle | undefined {
    return this.handles.get(recordId);
  }

  has(recordId: string): boolean {
    return this.handles.has(recordId);
  }

  add(recordId: string, handle: TaskHandle): void {
    this.handles.set(recordId, handle);
  }

  recordIds(): string[] {
    return [...this.handles.keys()];
  }

  /** Drops the record's handle and age; the handle it had. */
  drop(recordId: string): TaskHandle | undefined {
    const handle = this.handles.get(recordId);
    this.handles.delete(recordId);
    this.ages.delete(recordId);
    return handle;
  }

  /** Drops every handle; what they were. */
  dropAll(): Array<[string, TaskHandle]> {
    const all = [...this.handles];
    this.handles.clear();
    this.ages.clear();
    return all;
  }

  /**
   * How long this client has seen the record's task open, `now` on the steady clock: what the ledger holds from
   * earlier processes plus this process's steady time since it took the record up.
   */
  observedAge(record: TaskRecord, now: number): number {
    let age = this.ages.get(record.recordId);
    if (!age) {
      age = { since: now, ageMs: record.observedAgeMs ?? 0 };
      this.ages.set(record.recordId, age);
    }
    return age.ageMs + Math.max(0, now - age.since);
  }

  /** The record's age counts again from what the ledger holds (a record closed and reopened, or new). */
  restartAge(recordId: string, now?: number): void {
    if (now === undefined) this.ages.delete(recordId);
    else this.ages.set(recordId, { since: now, ageMs: 0 });
  }
}
