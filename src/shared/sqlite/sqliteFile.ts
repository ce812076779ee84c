/**
 * Opening a SQLite file the way both halves keep theirs (the server's task store, the client's ledger): created
 * owner-only, WAL with a bounded file, every commit synced to disk unless the caller chose otherwise, foreign keys
 * on, and migrated to this build's schema by `user_version`.
 */
import { chmodSync, closeSync, existsSync, openSync } from 'node:fs';

import type Database from 'better-sqlite3';

import { openDatabase } from './sqliteDriver.js';
import type { SqliteSynchronous } from './sqliteSynchronous.js';

/**
 * One schema step: SQL, or a function for a step SQL alone cannot say (a table rebuilt from its own stored
 * definition). Either runs inside the step's transaction, with foreign keys off (so a table can be rebuilt under
 * the rows that reference it) and checked before the step commits.
 */
export type Migration = string | ((db: Database.Database) => void);

/**
 * What the WAL file is truncated back to whenever the log starts over (SQLite's `journal_size_limit`): without it the
 * file keeps the largest size it ever reached. The task store's checkpointer starts the log over past the same size.
 */
export const WAL_SIZE_LIMIT_BYTES = 16 * 1024 * 1024;

/** How long the busy handler waits for another process's write lock, unless the opener chose otherwise. */
export const DEFAULT_BUSY_TIMEOUT_MS = 5000;

/** What the file is: its schema, and its name in error messages. */
export interface SqliteFileSchema {
  /** Each entry migrates the schema from version `index` to `index + 1`. Shipped entries are never edited. */
  migrations: readonly Migration[];
  /** What the file is, for error messages ("task store", "ledger"). */
  what: string;
}

/** What the opener chooses (the task store's and the ledger's options carry these). */
export interface SqliteOpenOptions {
  /** How long the busy handler waits for another process's write lock before failing. Default 5000 ms. */
  busyTimeoutMs?: number | undefined;
  /** Default `full`: see `SqliteSynchronous`. */
  synchronous?: SqliteSynchronous | undefined;
}

export function openSqliteFile(
  path: string,
  schema: SqliteFileSchema,
  options: SqliteOpenOptions = {},
): Database.Database {
  const busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
  if (path !== ':memory:' && !existsSync(path)) {
    // owner-only from the first byte: the file holds every caller's arguments, answers and results
    closeSync(openSync(path, 'a', 0o600));
    chmodSync(path, 0o600);
  }
  const db = openDatabase(path, { timeout: busyTimeoutMs });
  try {
    switchToWal(db, busyTimeoutMs);
    db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
    // spec: MUST NOT return CreateTaskResult until the task is durably created; FULL syncs each commit to disk
    db.pragma(`synchronous = ${synchronousLevel(options.synchronous)}`);
    db.pragma('foreign_keys = ON');
    migrate(db, path, schema);
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

/**
 * `journal_mode = WAL` on a new file needs the file's exclusive lock, and SQLite answers SQLITE_BUSY at once, without
 * its busy handler, when two connections could otherwise wait for each other (processes opening one new file at the
 * same moment): retry it, with short pauses, for as long as any other lock would be waited for.
 */
function switchToWal(db: Database.Database, busyTimeoutMs: number): void {
  const deadline = Date.now() + busyTimeoutMs;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let attempt = 0; ; attempt += 1) {
    try {
      db.pragma('journal_mode = WAL');
      return;
    } catch (error) {
      if ((error as { code?: unknown }).code !== 'SQLITE_BUSY' || Date.now() >= deadline) throw error;
      // a synchronous pause (this runs inside a constructor): 1, 2, 4 ... up to 50 ms
      Atomics.wait(pause, 0, 0, Math.min(50, 2 ** attempt));
    }
  }
}

function synchronousLevel(synchronous: SqliteSynchronous | undefined): 'FULL' | 'NORMAL' {
  if (synchronous === undefined || synchronous === 'full') return 'FULL';
  if (synchronous === 'normal') return 'NORMAL';
  throw new RangeError(`synchronous must be "full" or "normal", got ${JSON.stringify(synchronous)}`);
}

function migrate(db: Database.Database, path: string, { migrations, what }: SqliteFileSchema): void {
  const version = () => db.pragma('user_version', { simple: true }) as number;
  if (version() === migrations.length) return;
  // each step reads the version inside its write transaction: processes opening a new file at the same moment must
  // not both run one migration ("table ... already exists"). Foreign keys can only be switched outside a transaction.
  db.pragma('foreign_keys = OFF');
  try {
    migrateSteps(db, path, migrations, what);
  } finally {
    db.pragma('foreign_keys = ON');
  }
}

function migrateSteps(db: Database.Database, path: string, migrations: readonly Migration[], what: string): void {
  const version = () => db.pragma('user_version', { simple: true }) as number;
  for (;;) {
    const done = db
      .transaction(() => {
        const current = version();
        if (current > migrations.length) {
          throw new Error(
            `${what} ${path} has schema version ${current}, newer than this build knows (${migrations.length})`,
          );
        }
        if (current === migrations.length) return true;
        const step = migrations[current]!;
        if (typeof step === 'string') db.exec(step);
        else step(db);
        const broken = db.pragma('foreign_key_check') as unknown[];
        if (broken.length > 0) {
          throw new Error(
            `${what} ${path}: migration to schema version ${current + 1} broke ${broken.length} foreign key(s)`,
          );
        }
        db.pragma(`user_version = ${current + 1}`);
        return false;
      })
      .immediate();
    if (done) return;
  }
}
