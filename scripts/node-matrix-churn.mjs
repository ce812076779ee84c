/* global console, process, setTimeout -- Node globals: the lint config declares none for plain .mjs files */
// Run by scripts/node-matrix.sh with each Node line: every way this package makes better-sqlite3 objects (a file
// opened and migrated, statements prepared, pragmas, transactions, the checkpointer's worker started and stopped or
// left running at exit), repeated while JavaScript allocates, so that garbage collections run at arbitrary moments.
// A driver object left to the collector aborts such a process on Node 24 (src/shared/sqlite/sqliteDriver.ts).
// Usage: node scripts/node-matrix-churn.mjs PACKAGE_DIR (a directory holding dist/)   Prints "churn: ok" at the end.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const dist = (file) => pathToFileURL(join(process.argv[2], 'dist', file)).href;
const { openSqliteFile } = await import(dist('shared/sqlite/sqliteFile.js'));
const { startCheckpointer } = await import(dist('server/store/sqliteCheckpointer.js'));

const ROUNDS = 60;
const dir = mkdtempSync(join(tmpdir(), 'closeout-churn-'));
const migrations = ['CREATE TABLE t (x INTEGER)', 'CREATE INDEX t_x ON t (x)'];
let allocated = 0;
const allocate = () => {
  const objects = [];
  for (let i = 0; i < 20_000; i += 1) objects.push({ i, text: `x${i}` });
  allocated += objects.length;
};
let left;
try {
  for (let round = 0; round < ROUNDS; round += 1) {
    const path = join(dir, `f${round % 3}.db`);
    const db = openSqliteFile(path, { migrations, what: 'churn file', busyTimeoutMs: 1000 });
    const checkpointer = startCheckpointer(db, path, 5);
    const insert = db.prepare('INSERT INTO t (x) VALUES (?)');
    db.transaction(() => {
      for (let i = 0; i < 50; i += 1) insert.run(i);
    })();
    for (let i = 0; i < 20; i += 1) db.pragma('user_version', { simple: true });
    db.prepare(`SELECT COUNT(*) AS n FROM t WHERE x < ${round}`).get();
    allocate();
    await new Promise((resolve) => setTimeout(resolve, 5));
    if (round === ROUNDS - 1) {
      // the last one is left open, its worker running, for the process's exit to end
      left = db;
      break;
    }
    await checkpointer.stop();
    db.close();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(
  `churn: ok (${ROUNDS} files opened, ${allocated} objects allocated, ${left.open ? 'one' : 'none'} left open)`,
);
