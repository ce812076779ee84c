// A ledger the client cannot use is a TaskClientError with a code of its own (docs/client.md, "Errors"), never a raw
// SQLite or file-system error: `ledger-busy` while another process (a real one, as a backup or a sqlite3 shell is)
// holds its write lock past the busy timeout, at connect or at a call, nothing sent; `ledger-unavailable` for a ledger
// that cannot be opened at all.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { connectHttpTaskClient, SqliteLedger, TaskClientError } from '../../src/client/index.js';
import { type HeldLock, holdWriteLock } from '../support/ledgerLock.js';
import { type FixtureServer, startTasksFixture } from './fixtures/tasksFixtureServer.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-ledger-unavailable-'));
const cleanups: Array<() => Promise<void> | void> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function fixture(): Promise<FixtureServer> {
  const server = await startTasksFixture();
  cleanups.push(() => server.close());
  return server;
}

async function locked(path: string): Promise<HeldLock> {
  const lock = await holdWriteLock(path);
  cleanups.push(() => lock.release());
  return lock;
}

async function rejection(promise: Promise<unknown>): Promise<TaskClientError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TaskClientError);
  return error as TaskClientError;
}

describe('a ledger the client cannot use', { timeout: 30_000 }, () => {
  it('locked by another process at a call: ledger-busy, naming the ledger, nothing sent', async () => {
    const server = await fixture();
    const path = join(dir, 'busy-call.db');
    // a short busy timeout stands for the default 5 s: the lock outlasts it
    const ledger = new SqliteLedger(path, { busyTimeoutMs: 200 });
    cleanups.push(() => ledger.dispose());
    const client = await connectHttpTaskClient(server.url, { ledger });
    cleanups.push(() => client.close());
    await locked(path);

    const error = await rejection(client.callTool('slow', { n: 1 }));
    expect(error.code).toBe('ledger-busy');
    expect(error.message).toMatch(
      new RegExp(
        `^the ledger ${path} is locked by another process \\(.*\\): wait for it to finish .*; nothing was sent$`,
      ),
    );
    expect((error.cause as { code?: string }).code).toMatch(/^SQLITE_BUSY/);
    expect(server.count('tools/call')).toBe(0);
  });

  it('locked by another process at connect: ledger-busy', async () => {
    const server = await fixture();
    const path = join(dir, 'busy-open.db');
    await locked(path);
    const error = await rejection(
      connectHttpTaskClient(server.url, { ledger: () => new SqliteLedger(path, { busyTimeoutMs: 200 }) }),
    );
    expect(error.code).toBe('ledger-busy');
    expect(error.message).toMatch(/^the ledger is locked by another process .*; no client was made$/);
  });

  it('that cannot be opened: ledger-unavailable, saying why', async () => {
    const server = await fixture();
    const path = join(dir, 'no-such-directory', 'ledger.db');
    const error = await rejection(connectHttpTaskClient(server.url, { ledger: path }));
    expect(error.code).toBe('ledger-unavailable');
    expect(error.message).toBe(
      `cannot open the ledger ${path}: its directory does not exist (create it, or use another path); no client was made`,
    );
  });
});
