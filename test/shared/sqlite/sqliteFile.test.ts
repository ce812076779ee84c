// Both halves open their SQLite files through one function: owner-only, migrated once, and a file written by a newer
// build is refused with a clear message instead of being used with a schema this build does not know.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../../src/client/ledger/sqliteLedger.js';
import { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import { openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';
import { openSqliteFile } from '../../../src/shared/sqlite/sqliteFile.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-sqlite-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('openSqliteFile', () => {
  it('creates the file owner-only and migrates it to the last version, once', () => {
    const path = join(dir, 'fresh.db');
    const migrations = ['CREATE TABLE a (x INTEGER);', 'CREATE TABLE b (y INTEGER);'];
    const db = openSqliteFile(path, { migrations, what: 'test file' }, { busyTimeoutMs: 1000 });
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(db.pragma('user_version', { simple: true })).toBe(2);
    db.close();
    // opening again runs nothing twice
    openSqliteFile(path, { migrations, what: 'test file' }, { busyTimeoutMs: 1000 }).close();
  });

  it('refuses a task store or ledger written by a newer build, naming the file and both versions', async () => {
    for (const [name, open, dispose] of [
      ['store.db', (p: string) => new SqliteTaskStore(p), (s: SqliteTaskStore) => s.close()],
      ['ledger.db', (p: string) => new SqliteLedger(p), (l: SqliteLedger) => l.dispose()],
    ] as const) {
      const path = join(dir, name);
      await (dispose as (x: unknown) => Promise<void>)(open(path));
      const raw = openDatabase(path);
      raw.pragma('user_version = 999');
      raw.close();
      expect(() => open(path)).toThrow(/schema version 999, newer than this build knows/);
    }
  });
});
