// A ledger's records listed for people (src/client/ledger/recordListing.ts) answer alike on both ledgers: newest
// first, one status word per record (the server's while it is a task, else the client's), each filter and the search,
// a cursor that neither skips nor repeats a record, counts per status; a bad query is refused by name; and at 100,000
// records each query shape is planned on an index, never a scan of the table.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { Ledger, NewSubmission, ObservedTask } from '../../../src/client/index.js';
import { PostgresLedger } from '../../../src/client/ledger/postgresLedger.js';
import type { RecordListQuery, RecordStatus } from '../../../src/client/ledger/recordListing.js';
import {
  RECORD_STATUSES,
  recordCountStatement,
  RecordListQueryError,
  recordListStatement,
} from '../../../src/client/ledger/recordListing.js';
import { SQLITE_LISTING } from '../../../src/client/ledger/sqlite/sql.js';
import { SqliteLedger } from '../../../src/client/ledger/sqliteLedger.js';
import { argumentsDigest } from '../../../src/client/submitting/argumentsDigest.js';
import { openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';
import { type StartedPostgres, startPostgres } from '../../support/postgres.js';

const ENDPOINT = 'http://127.0.0.1:1/mcp';
const T0 = 1_700_000_000_000;
const HOLDER = 'p1';

let postgres: StartedPostgres;
beforeAll(async () => {
  postgres = await startPostgres();
});
afterAll(async () => {
  await postgres?.stop();
});

interface Fixture {
  ledger: Ledger;
  cleanup: () => Promise<void>;
}

const LEDGERS: Array<[string, () => Promise<Fixture>]> = [
  [
    'SqliteLedger',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'closeout-record-listing-'));
      const ledger = new SqliteLedger(join(dir, 'ledger.db'));
      return {
        ledger,
        cleanup: async () => {
          await ledger.dispose();
          await rm(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'PostgresLedger',
    async () => {
      const database = await postgres.createDatabase();
      const ledger = await PostgresLedger.open(database.connectionString);
      return { ledger, cleanup: () => ledger.dispose() };
    },
  ],
];

function submission(n: number, overrides: Partial<NewSubmission> = {}): NewSubmission {
  const args = { n };
  return {
    recordId: `r-${String(n).padStart(3, '0')}`,
    endpoint: ENDPOINT,
    toolName: n % 2 === 0 ? 'even' : 'odd',
    arguments: args,
    argumentsDigest: argumentsDigest(args),
    correlationId: `order-${n}`,
    idempotencyKey: `key-${n}`,
    submittedAt: T0 + n * 1_000,
    leaseHolder: HOLDER,
    leaseExpiresAt: T0 + 10_000_000,
    ...overrides,
  };
}

function task(taskId: string, status: ObservedTask['status']): ObservedTask {
  return {
    taskId,
    status,
    statusMessage: `now ${status}`,
    createdAt: '2026-07-28T10:00:00.000Z',
    lastUpdatedAt: '2026-07-28T10:00:00.000Z',
    ttlMs: 60_000,
    pollIntervalMs: 500,
    ...(status === 'completed' && { result: { content: [] } }),
    ...(status === 'failed' && { error: { code: -32603, message: 'boom' } }),
  };
}

/** One record in each way a record can stand; returns the status word each must read as, by record id. */
async function seed(ledger: Ledger): Promise<Map<string, RecordStatus>> {
  const expected = new Map<string, RecordStatus>();
  const at = (n: number) => T0 + n * 1_000 + 10;
  const intent = async (n: number) => (await ledger.recordIntent(submission(n))).record.recordId;
  let n = 0;
  // submitting: no answer yet
  expected.set(await intent(++n), 'submitting');
  // tracked tasks, working and input_required; a detached one
  for (const [status, detach] of [
    ['working', false],
    ['input_required', false],
    ['working', true],
  ] as const) {
    const id = await intent(++n);
    await ledger.commitTask(id, HOLDER, task(`task-${n}`, status), at(n));
    if (detach) await ledger.detach(id, HOLDER, at(n));
    expected.set(id, status);
  }
  // terminal tasks
  for (const status of ['completed', 'failed', 'cancelled'] as const) {
    const id = await intent(++n);
    await ledger.commitTask(id, HOLDER, task(`task-${n}`, status), at(n));
    expected.set(id, status);
  }
  // calls that ended without a task: an immediate result, a JSON-RPC error
  let id = await intent(++n);
  await ledger.closeOut(id, HOLDER, { localState: 'terminal', reason: 'result', result: { content: [] } }, at(n));
  expected.set(id, 'completed');
  id = await intent(++n);
  await ledger.closeOut(
    id,
    HOLDER,
    { localState: 'terminal', reason: 'error', error: { code: -32602, message: 'bad' } },
    at(n),
  );
  expected.set(id, 'failed');
  // a task that expired, and a call whose answer was lost
  id = await intent(++n);
  await ledger.commitTask(id, HOLDER, task(`task-${n}`, 'working'), at(n));
  await ledger.closeOut(id, HOLDER, { localState: 'expired', reason: 'gone' }, at(n));
  expected.set(id, 'expired');
  id = await intent(++n);
  await ledger.closeOut(id, HOLDER, { localState: 'unknown-outcome', reason: 'lost' }, at(n));
  expected.set(id, 'unknown-outcome');
  return expected;
}

describe.each(LEDGERS)('record listing on %s', (_name, makeFixture) => {
  let fixture: Fixture;
  let ledger: Ledger;
  let expected: Map<string, RecordStatus>;

  beforeEach(async () => {
    fixture = await makeFixture();
    ledger = fixture.ledger;
    expected = await seed(ledger);
  });
  afterEach(async () => {
    await fixture.cleanup();
  });

  const list = (query: RecordListQuery = {}) => ledger.listRecords!(query);

  it('lists every record newest first, each with its status word', async () => {
    const page = await list();
    expect(page.records.map((r) => r.recordId)).toEqual([...expected.keys()].reverse());
    for (const record of page.records)
      expect([record.recordId, record.status]).toEqual([record.recordId, expected.get(record.recordId)]);
    expect(page.nextCursor).toBeUndefined();
    const deploy = page.records.find((r) => r.recordId === 'r-002')!;
    expect(deploy).toMatchObject({
      taskId: 'task-2',
      toolName: 'even',
      correlationId: 'order-2',
      localState: 'tracking',
    });
  });

  it('filters by each status, alone or together, and counts them', async () => {
    for (const status of RECORD_STATUSES) {
      const ids = (await list({ status })).records.map((r) => r.recordId);
      const want = [...expected].filter(([, s]) => s === status).map(([id]) => id);
      expect(ids.sort(), status).toEqual(want.sort());
    }
    const both = (await list({ status: ['failed', 'expired'] })).records.map((r) => r.recordId);
    expect(both).toEqual(['r-010', 'r-009', 'r-006']);
    const counts = await ledger.countRecords!({ status: 'failed' });
    expect(counts).toEqual({
      submitting: 1,
      working: 2,
      input_required: 1,
      completed: 2,
      failed: 2,
      cancelled: 1,
      expired: 1,
      'unknown-outcome': 1,
    });
  });

  it('filters by tool, searches by task id prefix, record id, correlation id and idempotency key', async () => {
    expect((await list({ toolName: 'even' })).records.every((r) => r.toolName === 'even')).toBe(true);
    expect((await list({ toolName: 'even', status: 'input_required' })).records.map((r) => r.recordId)).toEqual([]);
    expect((await list({ toolName: 'odd', status: 'input_required' })).records.map((r) => r.recordId)).toEqual([
      'r-003',
    ]);
    expect((await list({ search: 'task-' })).records.map((r) => r.recordId)).toEqual([
      'r-010',
      'r-007',
      'r-006',
      'r-005',
      'r-004',
      'r-003',
      'r-002',
    ]);
    expect((await list({ search: 'task-3' })).records.map((r) => r.recordId)).toEqual(['r-003']);
    expect((await list({ search: 'r-008' })).records.map((r) => r.recordId)).toEqual(['r-008']);
    expect((await list({ search: 'order-10' })).records.map((r) => r.recordId)).toEqual(['r-010']);
    expect((await list({ search: 'key-1' })).records.map((r) => r.recordId)).toEqual(['r-001']);
    expect((await ledger.countRecords!({ search: 'task-' })).working).toBe(2);
  });

  it('pages by cursor without skipping or repeating a record, also within a status', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let i = 0; i < 20; i++) {
      const page = await list({ limit: 3, cursor });
      seen.push(...page.records.map((r) => r.recordId));
      cursor = page.nextCursor;
      if (!cursor) break;
    }
    expect(seen).toEqual([...expected.keys()].reverse());
    const first = await list({ status: ['completed', 'failed'], limit: 2 });
    const second = await list({ status: ['completed', 'failed'], limit: 2, cursor: first.nextCursor });
    expect([...first.records, ...second.records].map((r) => r.recordId)).toEqual(['r-009', 'r-008', 'r-006', 'r-005']);
    expect(second.nextCursor).toBeUndefined();
  });

  it('refuses a bad query by naming what is wrong', async () => {
    await expect(list({ status: 'done' as RecordStatus })).rejects.toThrow(RecordListQueryError);
    await expect(list({ status: 'done' as RecordStatus })).rejects.toThrow(/unknown status "done"/);
    await expect(list({ limit: 0 })).rejects.toThrow(/limit must be an integer from 1 to 1000/);
    await expect(list({ cursor: 'not a cursor' })).rejects.toThrow(/cursor is not one a listing returned/);
    await expect(list({ search: 'a\u0000b' })).rejects.toThrow(/search/);
  });
});

describe('record listing at 100,000 records (SQLite)', () => {
  const ROWS = 100_000;
  let dir: string;
  let db: Database.Database;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'closeout-record-listing-bulk-'));
    const path = join(dir, 'ledger.db');
    await new SqliteLedger(path).dispose();
    db = openDatabase(path);
    db.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})
      INSERT INTO submissions (record_id, endpoint, tool_name, arguments, arguments_digest, correlation_id, task_id,
        local_state, status, submitted_at, updated_at)
      SELECT printf('r-%06d', i), '${ENDPOINT}', 'tool-' || (i % 10), '{}', 'd', 'order-' || i, printf('t-%06d', i),
        CASE WHEN i % 100 = 0 THEN 'tracking' ELSE 'terminal' END,
        CASE WHEN i % 100 = 0 THEN 'working' WHEN i % 7 = 0 THEN 'failed' ELSE 'completed' END,
        ${T0} + i, ${T0} + i FROM n`);
    db.exec('ANALYZE');
  });
  afterAll(async () => {
    db?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const plan = (statement: { text: string; values: unknown[] }) =>
    (
      db
        .prepare(`EXPLAIN QUERY PLAN ${statement.text}`)
        .all(Object.fromEntries(statement.values.map((v, i) => [`p${i + 1}`, v]))) as Array<{ detail: string }>
    ).map((row) => row.detail);

  it.each<[string, RecordListQuery]>([
    ['everything', {}],
    ['a status', { status: 'working' }],
    ['several statuses', { status: ['failed', 'expired', 'unknown-outcome'] }],
    ['a tool', { toolName: 'tool-3' }],
    ['a tool and a status', { toolName: 'tool-3', status: 'failed' }],
    ['a search', { search: 't-0042' }],
    ['a later page', { cursor: Buffer.from(JSON.stringify([T0 + 5_000, 'r-005000'])).toString('base64url') }],
  ])('plans %s on an index, and answers at once', (_shape, query) => {
    const statement = recordListStatement(query, SQLITE_LISTING);
    const steps = plan(statement);
    expect(
      steps.filter((step) => /^SCAN submissions\b(?! USING)/.test(step)),
      steps.join('\n'),
    ).toEqual([]);
    const started = performance.now();
    const rows = db.prepare(statement.text).all(Object.fromEntries(statement.values.map((v, i) => [`p${i + 1}`, v])));
    expect(rows.length).toBeGreaterThan(0);
    // generous for a loaded 2-core machine; a scan of the table with its sort takes far longer than a page
    expect(performance.now() - started).toBeLessThan(250);
  });

  it('counts every status of 100,000 records on the status index', () => {
    const statement = recordCountStatement({}, SQLITE_LISTING);
    const steps = plan(statement);
    expect(
      steps.some((step) => /USING (COVERING )?INDEX submissions_listing_state/.test(step)),
      steps.join('\n'),
    ).toBe(true);
  });
});
