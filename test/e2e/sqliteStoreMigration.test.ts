// Several processes opening one new SQLite store file at the same moment (`closeout serve` instances sharing a file,
// started together) all come up, and the migrations run once. Found by the chaos soak: one of two instances started
// together died with "table tasks already exists". The test makes the race certain instead of likely: it holds the
// file's write lock while the processes open the store, so every one of them has read the schema version before any
// can migrate.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterEach, beforeAll, describe, expect, it } from 'vitest';

import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';

const BUILT_STORE = fileURLToPath(new URL('../../dist/server/store/sqliteTaskStore.js', import.meta.url));
const PROCESSES = 4;

let dir: string;

beforeAll(() => {
  if (!existsSync(BUILT_STORE)) throw new Error('dist/server is missing: run `npm run build` (npm test does it)');
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

function openStoreProcess(path: string): { child: ChildProcess; ready: Promise<void>; exited: Promise<string> } {
  const code = `
    const { SqliteTaskStore } = await import(${JSON.stringify(BUILT_STORE)});
    process.stdout.write('ready\\n');
    const store = new SqliteTaskStore(${JSON.stringify(path)});
    await store.close();`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const ready = new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
  const exited = new Promise<string>((resolve) =>
    child.once('exit', (exitCode) =>
      resolve(exitCode === 0 ? 'ok' : (stderr.split('\n').find((line) => /Error/.test(line)) ?? `exit ${exitCode}`)),
    ),
  );
  return { child, ready, exited };
}

describe('SqliteTaskStore opened by several processes at once', () => {
  it('migrates a new file once, and every process opens it', async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-sqlite-migrate-'));
    const path = join(dir, 'server.db');
    const holder = openDatabase(path);
    holder.pragma('journal_mode = WAL');
    holder.exec('BEGIN IMMEDIATE');
    const processes = Array.from({ length: PROCESSES }, () => openStoreProcess(path));
    await Promise.all(processes.map((p) => p.ready));
    // each now reads the version (0) and waits for the write lock (busy timeout 5 s)
    await new Promise((resolve) => setTimeout(resolve, 500));
    holder.exec('ROLLBACK');
    holder.close();
    expect(await Promise.all(processes.map((p) => p.exited))).toEqual(Array(PROCESSES).fill('ok'));

    const db = openDatabase(path, { readonly: true });
    try {
      expect(db.pragma('user_version', { simple: true })).toBeGreaterThan(0);
      expect(db.prepare(`SELECT COUNT(*) AS n FROM tasks`).get()).toEqual({ n: 0 });
    } finally {
      db.close();
    }
  });
});
