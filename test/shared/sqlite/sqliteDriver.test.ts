// The connections of src/shared/sqlite/sqliteDriver.ts keep every driver object until the thread ends, and their pragma(), which
// answers from statements prepared once per text, answers as the driver's own pragma() does, afresh on every call.
// Every connection of the package is opened there (the checkpointer's worker keeps its own objects itself).
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../../src/client/ledger/sqliteLedger.js';
import { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import { keptDriverObjects, openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-sqlite-driver-'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** Statements of the plain connections here, kept for the reason sqliteDriver.ts gives, so the suite runs on Node 24. */
const KEPT_HERE: object[] = [];

/**
 * `db` with the driver's own pragma() unchanged but each statement it prepares kept: it prepares them on the native
 * connection object the driver holds under its one symbol-keyed property.
 */
function driverKeepingItsStatements(db: Database.Database): Database.Database {
  const [native] = Object.getOwnPropertySymbols(db).map((key) => (db as unknown as Record<symbol, unknown>)[key]);
  const connection = native as { prepare: (...args: unknown[]) => object };
  const prepare = connection.prepare;
  expect(typeof prepare).toBe('function');
  connection.prepare = (...args: unknown[]) => {
    const statement = prepare.apply(connection, args);
    KEPT_HERE.push(statement);
    return statement;
  };
  KEPT_HERE.push(db);
  return db;
}

describe('openDatabase', () => {
  it('answers each pragma as the driver does, and afresh each time', () => {
    const kept = openDatabase(join(dir, 'kept.db'));
    const plain = driverKeepingItsStatements(new Database(join(dir, 'plain.db')));
    try {
      const both = (source: string, options?: Database.PragmaOptions) => {
        const answer = kept.pragma(source, options);
        expect(answer, source).toEqual(plain.pragma(source, options));
        return answer;
      };
      expect(both('journal_mode = WAL')).toEqual([{ journal_mode: 'wal' }]);
      expect(both('journal_mode', { simple: true })).toBe('wal');
      // pragmas that set without answering
      expect(both('foreign_keys = ON')).toEqual([]);
      expect(both('foreign_keys = ON', { simple: true })).toBeUndefined();
      expect(both('foreign_keys', { simple: true })).toBe(1);
      for (const db of [kept, plain]) db.exec('CREATE TABLE t (x INTEGER PRIMARY KEY, y TEXT NOT NULL)');
      both('table_info(t)');
      both('foreign_key_check');
      both('page_size', { simple: true });
      // the same text asked again reads the file again, and a pragma asked both ways keeps each way's shape
      expect(both('user_version', { simple: true })).toBe(0);
      both('user_version = 7');
      expect(both('user_version', { simple: true })).toBe(7);
      expect(both('user_version')).toEqual([{ user_version: 7 }]);
      expect(both('user_version', { simple: true })).toBe(7);
      // an unknown pragma answers nothing; a malformed one throws, as the driver's does
      expect(both('no_such_pragma')).toEqual([]);
      expect(() => kept.pragma('user_version(')).toThrow(/incomplete input/);
      expect(() => plain.pragma('user_version(')).toThrow(/incomplete input/);
      // the driver's pragma() did prepare on the native connection, so none of its statements is left to the collector
      expect(KEPT_HERE.length).toBeGreaterThan(10);
    } finally {
      kept.close();
      plain.close();
    }
  });

  it('prepares statements and runs transactions as the driver does', () => {
    const db = openDatabase(join(dir, 'kept.db'));
    try {
      db.exec('CREATE TABLE t (x INTEGER)');
      const insert = db.prepare('INSERT INTO t (x) VALUES (?)');
      db.transaction(() => {
        for (let x = 0; x < 10; x += 1) insert.run(x);
      })();
      expect(db.prepare('SELECT COUNT(*) AS n, SUM(x) AS s FROM t').get()).toEqual({ n: 10, s: 45 });
      expect(() => db.prepare('SELECT nope FROM t')).toThrow(/no such column/);
    } finally {
      db.close();
    }
  });
});

describe('what a connection keeps', () => {
  it('is one statement per distinct text, however often the text is prepared', () => {
    const db = openDatabase(join(dir, 'kept.db'));
    try {
      db.exec('CREATE TABLE t (x INTEGER)');
      const before = keptDriverObjects();
      for (let x = 0; x < 200; x += 1) {
        db.prepare('INSERT INTO t (x) VALUES (?)').run(x);
        db.pragma('user_version', { simple: true });
      }
      expect(db.prepare('SELECT COUNT(*) AS n FROM t').get()).toEqual({ n: 200 });
      expect(keptDriverObjects() - before).toBe(3);
    } finally {
      db.close();
    }
  });

  it('does not grow with the listings a console reads every few hundred milliseconds, on the ledger and the store', async () => {
    const ledger = new SqliteLedger(join(dir, 'ledger.db'));
    const store = new SqliteTaskStore(join(dir, 'store.db'));
    try {
      const read = async (round: number) => {
        await ledger.listRecords({ limit: 1 + (round % 20) });
        await ledger.countRecords({ status: 'working' });
        await store.listTasks({ limit: 1 + (round % 20), status: 'completed' });
        await store.countTasks({});
      };
      await read(0);
      const before = keptDriverObjects();
      for (let round = 1; round <= 400; round += 1) await read(round);
      expect(keptDriverObjects() - before).toBeLessThanOrEqual(4);
    } finally {
      await ledger.dispose();
      await store.close();
    }
  });
});

describe('connections of this package', () => {
  /** The files under `dir` (relative to the package's root) that open a connection with `new Database(`. */
  function opening(dir: string, extensions: RegExp): string[] {
    const root = join(import.meta.dirname, '..', '..', '..');
    return (readdirSync(join(root, dir), { recursive: true }) as string[])
      .filter((file) => extensions.test(file))
      .filter((file) => /new Database\(/.test(readFileSync(join(root, dir, file), 'utf8')))
      .map((file) => `${dir}/${file}`)
      .sort();
  }

  it('are all opened by openDatabase, but for the checkpointer worker', () => {
    expect(opening('src', /\.ts$/)).toEqual([
      'src/server/store/sqliteCheckpointer.ts',
      'src/shared/sqlite/sqliteDriver.ts',
    ]);
  });

  it("are opened by openDatabase in the tests too: a test's own connection left to the collector aborts the suite on Node 24", () => {
    // this file compares openDatabase with the driver's own connection on purpose (a handful of statements); the lock
    // holder of test/support/ledgerLock.ts prepares none
    expect(opening('test', /\.(ts|mjs|js)$/)).toEqual([
      'test/shared/sqlite/sqliteDriver.test.ts',
      'test/support/ledgerLock.ts',
    ]);
  });
});
