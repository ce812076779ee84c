/**
 * The PostgreSQL ledger's schedule notes (Ledger.noteSchedule, the one deferred write): held in memory and shown by
 * reads at once, then committed in one statement, with the ledger's next write or after `deferMs`, whichever comes
 * first. A commit that fails drops them: they are bookkeeping.
 */
import { asError } from '../../../shared/postgres/errors.js';
import type { ScheduleNote, TaskRecord } from '../ledger.js';
import type { PendingNote } from '../records.js';
import { applyNote, mergeNote } from '../records.js';

export interface ScheduleNotesOptions {
  /** Longest a note waits in memory before it is committed. */
  deferMs: number;
  /** Commits the notes, as the parameters of `SQL.applyNotes`, in one transaction. */
  commit: (params: unknown[]) => Promise<unknown>;
  /** Told about a commit that failed (its notes are dropped). */
  onError: (error: Error) => void;
}

export class PendingScheduleNotes {
  private readonly options: ScheduleNotesOptions;
  private readonly pending = new Map<string, PendingNote>();
  /** The notes a flush is committing right now. */
  private writing = new Map<string, PendingNote>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private closed = false;

  constructor(options: ScheduleNotesOptions) {
    this.options = options;
  }

  /** `note` folded into what `holder` already noted for the record; committed within `deferMs`. */
  add(recordId: string, holder: string, note: ScheduleNote): void {
    const merged = mergeNote(this.pending.get(recordId), holder, note);
    this.pending.set(recordId, merged);
    if (this.timer === undefined && !this.closed) {
      this.timer = setTimeout(() => void this.flush(), this.options.deferMs);
      // pending bookkeeping must not keep a process alive; close() writes what is left
      this.timer.unref();
    }
  }

  /** Commit the pending notes now, in one statement. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.flushing) await this.flushing;
    if (this.pending.size === 0) return;
    const notes = [...this.pending].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    // still shown by reads of this object until the write is done (noteSchedule: "reads see it at once")
    this.writing = new Map(notes);
    this.pending.clear();
    const params = [
      notes.map(([recordId]) => recordId),
      notes.map(([, note]) => note.holder),
      notes.map(([, note]) => note.polledAt ?? null),
      notes.map(([, note]) => note.nextPollAt !== undefined),
      notes.map(([, note]) => note.nextPollAt ?? null),
      notes.map(([, note]) => note.observedAgeMs ?? null),
    ];
    this.flushing = this.options.commit(params).then(
      () => undefined,
      (error: unknown) => this.options.onError(asError(error)),
    );
    try {
      await this.flushing;
    } finally {
      this.flushing = undefined;
      this.writing = new Map();
    }
  }

  /** What was noted for the record and not committed yet, applied as the write will apply it (the older notes first). */
  applyTo(record: TaskRecord): void {
    applyNote(record, this.writing.get(record.recordId));
    applyNote(record, this.pending.get(record.recordId));
  }

  /** Commits what is left; later notes start no timer (the ledger is being disposed of). */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }
}
