// Invariants: the SQLite ledger passes the one Ledger contract (contract.ts); its file is owner-only, in WAL mode and
// versioned, and a file written by a newer schema is refused.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { NewSubmission } from '../../../src/client/index.js';
import { argumentsDigest, LEDGER_SCHEMA_VERSION, SqliteLedger } from '../../../src/client/index.js';
import { describeLedgerContract } from './contract.js';

describeLedgerContract('SqliteLedger', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-ledger-'));
  const path = join(dir, 'ledger.db');
  const ledger = new SqliteLedger(path);
  return {
    ledger,
    openSecond: async (options) => new SqliteLedger(path, options),
    execRaw: async (sql) => {
      const raw = new Database(path);
      try {
        raw.prepare(sql).run();
      } finally {
        raw.close();
      }
    },
    historyTable: 'status_history',
    cleanup: async () => {
      await ledger.dispose();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

const T0 = 1_700_000_000_000;

let dir: string;
let path: string;
let ledger: SqliteLedger;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-ledger-'));
  path = join(dir, 'ledger.db');
  ledger = new SqliteLedger(path);
});

afterEach(async () => {
  await ledger.dispose();
  rmSync(dir, { recursive: true, force: true });
});

function submission(overrides: Partial<NewSubmission> = {}): NewSubmission {
  const args = { city: 'Oslo' };
  return {
    recordId: `r-${Math.random().toString(36).slice(2)}`,
    endpoint: 'http://127.0.0.1:1/mcp',
    toolName: 'forecast',
    arguments: args,
    argumentsDigest: argumentsDigest(args),
    submittedAt: T0,
    leaseHolder: 'p1',
    leaseExpiresAt: T0 + 30_000,
    ...overrides,
  };
}

describe('SqliteLedger file', () => {
  it('creates the file owner-only and records its schema version', async () => {
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const raw = new Database(path, { readonly: true });
    expect(raw.pragma('user_version', { simple: true })).toBe(LEDGER_SCHEMA_VERSION);
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
    // reopening migrates nothing and keeps the data
    await ledger.recordIntent(submission({ recordId: 'keep' }));
    await ledger.dispose();
    ledger = new SqliteLedger(path);
    expect((await ledger.get('keep'))?.toolName).toBe('forecast');
  });

  it('refuses a ledger written by a newer schema', async () => {
    await ledger.dispose();
    const raw = new Database(path);
    raw.pragma(`user_version = ${LEDGER_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => new SqliteLedger(path)).toThrow(/newer than this build/);
    ledger = new SqliteLedger(join(dir, 'other.db'));
  });
});
