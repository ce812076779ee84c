// A file written by any earlier schema version opens in this build, migrated, with everything it held usable (shipped
// migrations are append-only; RELIABILITY.md, "What arrived is kept"). The fixtures in test/fixtures/schemas were
// written by the builds of the commits in their names, through those builds' own APIs (make-fixtures.sh). The ledger's
// version 1 exists in two spellings: as first shipped `superseded_by` was not deferrable, and resubmitting a record of
// such a file failed with "FOREIGN KEY constraint failed" until a migration rebuilt the table.
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, describe, expect, it } from 'vitest';

import { LEDGER_SCHEMA_VERSION } from '../src/client/ledger/sqlite/schema.js';
import { SqliteLedger } from '../src/client/ledger/sqliteLedger.js';
import { argumentsDigest } from '../src/client/submitting/argumentsDigest.js';
import { SqliteTaskStore, STORE_SCHEMA_VERSION } from '../src/server/store/sqliteTaskStore.js';
import { openDatabase } from '../src/shared/sqlite/sqliteDriver.js';

const FIXTURES = fileURLToPath(new URL('./fixtures/schemas/', import.meta.url));
const ENDPOINT = 'http://127.0.0.1:3000/mcp';
const dir = mkdtempSync(join(tmpdir(), 'closeout-schema-migrations-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of a fixture to migrate (the committed file stays as the earlier build wrote it). */
function copyOf(fixture: string): string {
  const path = join(dir, fixture);
  copyFileSync(join(FIXTURES, fixture), path);
  return path;
}

function inspect(path: string): { version: number; foreignKeyErrors: unknown[]; submissionsSql: string | undefined } {
  const db = openDatabase(path, { readonly: true });
  try {
    return {
      version: db.pragma('user_version', { simple: true }) as number,
      foreignKeyErrors: db.pragma('foreign_key_check') as unknown[],
      submissionsSql: (
        db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'submissions'`).get() as
          { sql: string } | undefined
      )?.sql,
    };
  } finally {
    db.close();
  }
}

describe.each(['ledger-v1-8d5fc0c.db', 'ledger-v1-ac19d23.db', 'ledger-v2-c97b8e6.db'])(
  'a ledger written by an earlier build (%s)',
  (fixture) => {
    it('is migrated with its records, history and inputs, and its unknown-outcome record can be resubmitted', async () => {
      const path = copyOf(fixture);
      const ledger = new SqliteLedger(path);
      try {
        const records = await ledger.list();
        expect(records.map((record) => [record.recordId, record.localState, record.taskId])).toEqual([
          ['done', 'terminal', 'task-done'],
          ['lost', 'unknown-outcome', undefined],
          ['open', 'detached', 'task-open'],
        ]);
        expect((await ledger.get('done'))?.result).toEqual({ content: [{ type: 'text', text: 'done' }] });
        expect((await ledger.get('open'))?.inputs).toEqual([
          expect.objectContaining({ key: 'approval', response: { action: 'accept', content: {} } }),
        ]);
        expect((await ledger.history('lost')).map((entry) => entry.localState)).toEqual([
          'submitting',
          'unknown-outcome',
        ]);

        const args = { items: 2 };
        const again = await ledger.recordResubmission('lost', {
          recordId: 'again',
          endpoint: ENDPOINT,
          toolName: 'batch_job',
          arguments: args,
          argumentsDigest: argumentsDigest(args),
          idempotencyKey: 'lost-key',
          submittedAt: 10_000,
          leaseHolder: 'new-process',
          leaseExpiresAt: 40_000,
          resubmittedFrom: 'lost',
        });
        expect(again).toMatchObject({ created: true, record: { recordId: 'again', resubmittedFrom: 'lost' } });
        expect((await ledger.get('lost'))?.supersededBy).toBe('again');
        expect((await ledger.findByIdempotencyKey(ENDPOINT, 'lost-key'))?.recordId).toBe('again');
        // the migrated file still keeps a taskId unique per endpoint
        await ledger.commitTask(
          'again',
          'new-process',
          {
            taskId: 'task-done',
            status: 'working',
            statusMessage: undefined,
            createdAt: '2026-11-30T00:00:00.000Z',
            lastUpdatedAt: '2026-11-30T00:00:00.000Z',
            ttlMs: null,
            pollIntervalMs: undefined,
          },
          10_001,
        );
        expect((await ledger.get('again'))?.taskId).toBeUndefined();
      } finally {
        await ledger.dispose();
      }
      const after = inspect(path);
      expect(after.version).toBe(LEDGER_SCHEMA_VERSION);
      expect(after.foreignKeyErrors).toEqual([]);
      expect(after.submissionsSql).toMatch(/superseded_by\s+TEXT REFERENCES submissions \(record_id\) DEFERRABLE/);
    });
  },
);

describe.each([
  'store-v1-0b0553c.db',
  'store-v2-6581262.db',
  'store-v3-7194a8a.db',
  'store-v4-ef01235.db',
  'store-v5-7c2bc51.db',
  'store-v6-d52effc.db',
  'store-v7-dcbf01a.db',
])('a task store written by an earlier build (%s)', (fixture) => {
  it('is migrated with its tasks, inputs and tombstones, and takes new tasks', async () => {
    const path = copyOf(fixture);
    const store = new SqliteTaskStore(path);
    try {
      expect(await store.get('task-done')).toMatchObject({
        status: 'completed',
        result: { content: [{ type: 'text', text: 'done' }] },
        idempotencyKey: 'k-done',
      });
      const asking = await store.get('task-asking');
      expect(asking).toMatchObject({ status: 'input_required' });
      expect(asking?.inputs.map((input) => input.key)).toEqual(['approval']);
      expect(await store.get('task-working')).toMatchObject({ status: 'working', attempt: 1 });
      expect(await store.get('task-purged')).toBeUndefined();
      // a tombstone written before tombstones had owners says nothing to anyone: never a wrong "expired"
      expect(await store.wasPurged('task-purged', 'bob')).toBe(false);

      const now = Date.now();
      const base = {
        principal: 'alice',
        toolName: 'batch_job',
        arguments: { items: 1 },
        createdAt: now,
        ttlMs: 60_000,
        pollIntervalMs: 1_000,
        resumable: true,
        leaseHolder: 'new-instance',
        leaseExpiresAt: now + 10_000,
      };
      expect((await store.create({ ...base, taskId: 'task-new' })).created).toBe(true);
      const replay = await store.create({ ...base, taskId: 'task-other', idempotencyKey: 'k-done' });
      expect(replay).toMatchObject({ created: false, task: { taskId: 'task-done' } });
      // durable steps (schema version 7) work on a task written before they existed, fenced as ever
      const working = (await store.get('task-working'))!;
      const lease = { taskId: 'task-working', fence: working.fence };
      expect(await store.readSteps('task-working')).toEqual({ steps: [], checkpoint: undefined });
      expect((await store.recordStep(lease, 'start-job', { jobId: 'j-1' }, now)).held).toBe(true);
      expect(await store.saveCheckpoint(lease, { next: 2 }, now)).toBe(true);
      expect(await store.recordStep({ ...lease, fence: lease.fence - 1 }, 'stale', 1, now)).toEqual({
        held: false,
        step: undefined,
      });
      expect(await store.readSteps('task-working')).toEqual({
        steps: [{ name: 'start-job', result: { jobId: 'j-1' }, committedAt: now }],
        checkpoint: { next: 2 },
      });
    } finally {
      await store.close();
    }
    const after = inspect(path);
    expect(after.version).toBe(STORE_SCHEMA_VERSION);
    expect(after.foreignKeyErrors).toEqual([]);
  });
});
