/**
 * Opening a SQLite file the way both halves keep theirs (the server's task store, the client's ledger): created
 * owner-only, WAL, foreign keys on, and migrated to this build's schema by `user_version`.
 */
import { chmodSync, closeSync, existsSync, openSync } from 'node:fs';

import Database from 'better-sqlite3';

/**
 * One schema step: SQL, or a function for a step SQL alone cannot say (a table rebuilt from its own stored
 * definition). Either runs inside the step's transaction, with foreign keys off (so a table can be rebuilt under
 * the rows that reference it) and checked before the step commits.
 */
export type Migration = string | ((db: Database.Database) => void);

export interface SqliteFileOptions {
  /** Each entry migrates the schema from version `index` to `index + 1`. Shipped entries are never edited. */
  migrations: readonly Migration[];
  /** What the file is, for error messages ("task store", "ledger"). */
  what: string;
  /** How long the busy handler waits for another process's write lock before failing. */
  busyTimeoutMs: number;
}

export function openSqliteFile(path: string, options: SqliteFileOptions): Database.Database {
  if (path !== ':memory:' && !existsSync(path)) {
    // owner-only from the first byte: the file holds every caller's arguments, answers and results
    closeSync(openSync(path, 'a', 0o600));
    chmodSync(path, 0o600);
  }
  const db = new Database(path, { timeout: options.busyTimeoutMs });
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    migrate(db, path, options);
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

function migrate(db: Database.Database, path: string, { migrations, what }: SqliteFileOptions): void {
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
