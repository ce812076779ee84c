// Invariants: with the checkpointer, the serving connection checkpoints by itself only past the WAL's size limit
// (wal_autocheckpoint at 16 MiB of pages) and the WAL still reaches the database file, copied by the worker; the worker
// never holds the checkpoint lock while it waits for the writer lock, so the log stays bounded under writes without a
// pause; stopping hands the automatic checkpoint back; the worker never keeps a process alive; a worker that dies hands
// the automatic checkpoint back.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import type Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { startCheckpointer } from '../../../src/server/store/sqliteCheckpointer.js';
import { openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';

const run = promisify(execFile);
const DIST_CHECKPOINTER = fileURLToPath(new URL('../../../dist/server/store/sqliteCheckpointer.js', import.meta.url));
const DIST_DRIVER = fileURLToPath(new URL('../../../dist/shared/sqlite/sqliteDriver.js', import.meta.url));

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-checkpointer-'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A WAL database with `rows` rows of 1 KB, each in its own commit. */
function fill(db: Database.Database, rows: number): void {
  db.exec('CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)');
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  for (let i = 0; i < rows; i++) insert.run('x'.repeat(1024));
}

function open(name: string): { db: Database.Database; path: string } {
  const path = join(dir, name);
  const db = openDatabase(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  return { db, path };
}

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('startCheckpointer', () => {
  it('copies the WAL into the database file from its worker while the serving connection does not', async () => {
    // without it, and with the automatic checkpoint off, the rows stay in the WAL: the database file does not grow
    const control = open('control.db');
    control.db.pragma('wal_autocheckpoint = 0');
    fill(control.db, 2000);
    await settle(600);
    const controlSize = statSync(control.path).size;
    expect(controlSize).toBeLessThan(64 * 1024);

    const served = open('served.db');
    const checkpointer = startCheckpointer(served.db, served.path, 50);
    try {
      // 16 MiB of 4 KiB pages: far more than the 2 MB written below
      expect(served.db.pragma('wal_autocheckpoint', { simple: true })).toBe(4096);
      fill(served.db, 2000);
      const deadline = Date.now() + 10_000;
      while (statSync(served.path).size < 1024 * 1024 && Date.now() < deadline) await settle(50);
      // 2,000 rows of 1 KB reached the database file
      expect(statSync(served.path).size).toBeGreaterThan(1024 * 1024);
      expect(served.db.prepare('SELECT COUNT(*) AS n FROM t').get()).toEqual({ n: 2000 });
    } finally {
      await checkpointer.stop();
      await checkpointer.stop(); // twice is harmless
    }
    expect(served.db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    served.db.close();
    control.db.close();
  });

  it('never holds the checkpoint lock while another connection holds the writer lock, and truncates once it is free', async () => {
    // The worker truncates a log it finds past `restartBytes`. Had it waited for the writer lock (it once waited up to
    // 2 s), it would hold the checkpoint lock all that time and the serving connection's own checkpoint would find it
    // taken: here a third connection holds the writer lock throughout, so that wait would last every round.
    const restartBytes = 256 * 1024;
    const served = open('held.db');
    served.db.pragma('wal_autocheckpoint = 0');
    fill(served.db, 600);
    const walBytes = () => statSync(`${served.path}-wal`, { throwIfNoEntry: false })?.size ?? 0;
    expect(walBytes()).toBeGreaterThan(restartBytes);
    const holder = openDatabase(served.path);
    holder.exec('BEGIN IMMEDIATE');
    const checkpointer = startCheckpointer(served.db, served.path, 50, restartBytes);
    try {
      // the serving connection checkpoints as its commits would at the threshold, for 1.5 s of worker rounds
      let longestShutOut = 0;
      let shutOutSince: number | undefined;
      let probes = 0;
      const started = Date.now();
      while (Date.now() - started < 1500) {
        const [{ busy }] = served.db.pragma('wal_checkpoint(PASSIVE)') as [{ busy: number }];
        probes++;
        const now = Date.now();
        if (busy === 1) shutOutSince ??= now;
        else shutOutSince = undefined;
        if (shutOutSince !== undefined) longestShutOut = Math.max(longestShutOut, now - shutOutSince);
        await settle(5);
      }
      expect(probes).toBeGreaterThan(50);
      // a worker round copies what is new, in milliseconds; waiting for the writer lock would shut it out for seconds
      expect(longestShutOut).toBeLessThan(250);
      // the writer lock is free again: the worker's TRUNCATE empties the log
      holder.exec('ROLLBACK');
      const deadline = Date.now() + 10_000;
      while (walBytes() > 0 && Date.now() < deadline) await settle(20);
      expect(walBytes()).toBe(0);
    } finally {
      if (holder.inTransaction) holder.exec('ROLLBACK');
      holder.close();
      await checkpointer.stop();
      served.db.close();
    }
  });

  it('keeps the log bounded while the writer writes without a pause', { timeout: 30_000 }, async () => {
    // Past `restartBytes` the writer checkpoints itself at each commit, so the log starts over; it outgrows the
    // threshold only while a worker round holds the checkpoint lock, by what the writer commits meanwhile. Unpaced,
    // that is fast: the largest log measured on this project's machines ranged from 1x to 5.4x the threshold over
    // dozens of runs (the writer appends at hundreds of MB/s between its own checkpoints, a round lasts up to ~30 ms).
    // Without that bound the log held all of it (600 MB in 12 s); a worker that waited 2 s for the writer
    // lock let it reach 400 MB here. The bound below is an order of magnitude under both and well over the noise.
    const restartBytes = 2 * 1024 * 1024;
    const served = open('busy.db');
    served.db.pragma(`journal_size_limit = ${restartBytes}`);
    served.db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)');
    const insert = served.db.prepare('INSERT INTO t (v) VALUES (?)');
    const write = served.db.transaction(() => {
      for (let i = 0; i < 20; i++) insert.run('x'.repeat(1024));
    });
    const walBytes = () => statSync(`${served.path}-wal`, { throwIfNoEntry: false })?.size ?? 0;
    const checkpointer = startCheckpointer(served.db, served.path, 50, restartBytes);
    let largest = 0;
    let commits = 0;
    try {
      // the main thread never yields: the writer lock is free only between two commits, as under a burst of tasks;
      // bounded in time and in count
      const started = Date.now();
      while (Date.now() - started < 4000 && commits < 1_000_000) {
        write();
        if (++commits % 10 === 0) largest = Math.max(largest, walBytes());
      }
    } finally {
      await checkpointer.stop();
      served.db.close();
    }
    // tens of times the threshold were written: without a bound the log holds them all
    expect(commits * 20 * 1024).toBeGreaterThan(20 * restartBytes);
    expect(largest).toBeLessThan(16 * restartBytes);
  });

  it('hands the automatic checkpoint back to the serving connection when the worker dies', async () => {
    const served = open('orphan.db');
    // the worker cannot open this path, so it fails at once, as a worker that crashed
    const checkpointer = startCheckpointer(served.db, join(dir, 'missing', 'orphan.db'), 50);
    expect(served.db.pragma('wal_autocheckpoint', { simple: true })).toBe(4096);
    const deadline = Date.now() + 10_000;
    while (served.db.pragma('wal_autocheckpoint', { simple: true }) === 4096 && Date.now() < deadline) await settle(20);
    expect(served.db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    await checkpointer.stop(); // after the worker is gone, stopping still returns
    served.db.close();
  });

  it('lets a process await stop() at top level and then exit by itself', async () => {
    const path = join(dir, 'stop.db');
    const script = `
      import { openDatabase } from ${JSON.stringify(DIST_DRIVER)};
      import { startCheckpointer } from ${JSON.stringify(DIST_CHECKPOINTER)};
      const db = openDatabase(${JSON.stringify(path)});
      db.pragma('journal_mode = WAL');
      const checkpointer = startCheckpointer(db, ${JSON.stringify(path)}, 50);
      db.exec('CREATE TABLE t (v TEXT)');
      await checkpointer.stop();
      db.close();
      console.log('stopped');
    `;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('../../..', import.meta.url)),
      timeout: 20_000,
    });
    expect(stdout.trim()).toBe('stopped');
  });

  it('does not keep a process alive that is otherwise done', async () => {
    const path = join(dir, 'alive.db');
    const script = `
      import { openDatabase } from ${JSON.stringify(DIST_DRIVER)};
      import { startCheckpointer } from ${JSON.stringify(DIST_CHECKPOINTER)};
      const db = openDatabase(${JSON.stringify(path)});
      db.pragma('journal_mode = WAL');
      startCheckpointer(db, ${JSON.stringify(path)}, 50);
      db.exec('CREATE TABLE t (v TEXT)');
      console.log('opened');
    `;
    const started = Date.now();
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('../../..', import.meta.url)),
      timeout: 20_000,
    });
    expect(stdout.trim()).toBe('opened');
    expect(Date.now() - started).toBeLessThan(15_000);
  });
});
