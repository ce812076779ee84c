/**
 * Group commit for a SQLite file (better-sqlite3, WAL), shared by the server's task store and the client's ledger:
 * the writes asked for in one turn of the event loop share one IMMEDIATE transaction, so one fsync at the default
 * `synchronous=FULL` instead of one each (bench/RESULTS.md, sections 15 and 27). Each write runs in a savepoint of its
 * own, so one that is refused (a limit, a lost fence) leaves the others. Every promise settles after the commit:
 * nothing is acknowledged before it is on disk (docs/DESIGN.md, rule 4). A group whose transaction fails once it has
 * begun (a full disk at the commit, an error that rolls the whole transaction back) is run again one write per
 * transaction, so that one write's failure is its own and not its neighbours' (a large result that does not fit must
 * not take a small close-out down with it); a group that cannot begin (a lock held past the busy timeout) fails whole,
 * and none of it is stored.
 */
import type Database from 'better-sqlite3';

/** A write waiting for the next group commit, and how to answer its caller once the group is committed or not. */
interface GroupedWrite {
  write: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** What one write of a group came to, told to its caller once the group is committed. */
type Settled = { ok: true; value: unknown } | { ok: false; error: unknown };

export class SqliteGroupCommit {
  private group: GroupedWrite[] = [];
  /** The group's transaction, and a savepoint inside it for each write (better-sqlite3 nests by savepoints). */
  private readonly commitTx: Database.Transaction<(group: GroupedWrite[]) => Settled[]>;
  private readonly savepoint: Database.Transaction<(write: () => unknown) => unknown>;
  /** One write in a transaction of its own: a failed group's writes, run again. */
  private readonly alone: Database.Transaction<(write: () => unknown) => unknown>;
  /** Whether the group being committed got past BEGIN (a failure after it is some write's, or the commit's). */
  private began = false;

  /** `first` runs at the start of every group's transaction, before its writes (and is undone with it). */
  constructor(db: Database.Database, first: () => void = () => undefined) {
    this.savepoint = db.transaction((write: () => unknown) => write());
    this.alone = db.transaction((write: () => unknown) => {
      first();
      return write();
    });
    this.commitTx = db.transaction((group: GroupedWrite[]) => {
      this.began = true;
      first();
      return group.map(({ write }): Settled => {
        try {
          return { ok: true, value: this.savepoint(write) };
        } catch (error) {
          // an error that took the whole transaction with it (a full disk, an I/O error) fails the group, the writes
          // not yet run included; any other is this write's own (a limit, a lost fence): only its savepoint is undone
          if (!db.inTransaction) throw error;
          return { ok: false, error };
        }
      });
    });
  }

  /** Runs `write` in the next group commit; settles once that group is committed, or failed. */
  run<T>(write: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.group.length === 0) setImmediate(() => this.commit());
      this.group.push({ write, resolve: resolve as (value: unknown) => void, reject });
    });
  }

  /**
   * Commits the writes asked for so far now: before the file closes, so they are committed or failed, never dropped
   * (on a closed file every one fails with better-sqlite3's "not open").
   */
  commit(): void {
    const group = this.group;
    if (group.length === 0) return;
    this.group = [];
    let settled: Settled[];
    this.began = false;
    try {
      settled = this.commitTx.immediate(group);
    } catch (error) {
      if (!this.began || group.length === 1) {
        for (const { reject } of group) reject(error);
        return;
      }
      // rolled back whole: each write again, alone (each was undone with the group, so none is stored twice)
      settled = group.map(({ write }): Settled => {
        try {
          return { ok: true, value: this.alone.immediate(write) };
        } catch (alone) {
          return { ok: false, error: alone };
        }
      });
    }
    group.forEach(({ resolve, reject }, i) => {
      const outcome = settled[i]!;
      if (outcome.ok) resolve(outcome.value);
      else reject(outcome.error);
    });
  }
}
