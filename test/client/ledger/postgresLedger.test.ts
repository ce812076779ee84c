// Invariants: the PostgreSQL ledger passes the one Ledger contract (src/testing/ledgerContract.ts); it migrates
// itself once when many workers open a fresh database together; the connection string's password never reaches an
// error or a log line.

import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';

import { isTransientStorageError } from '../../../src/client/ledger/ledger.js';
import { POSTGRES_LEDGER_SCHEMA_VERSION, PostgresLedger } from '../../../src/client/ledger/postgresLedger.js';
import { describeLedgerContract } from '../../../src/testing/index.js';
import { everythingShown, failingConnections } from '../../support/passwordLeaks.js';
import { type StartedPostgres, startPostgres } from '../../support/postgres.js';

let postgres: StartedPostgres;

beforeAll(async () => {
  postgres = await startPostgres();
});

afterAll(async () => {
  await postgres?.stop();
});

describeLedgerContract('PostgresLedger', async () => {
  const database = await postgres.createDatabase();
  const ledger = await PostgresLedger.open(database.connectionString);
  return {
    ledger,
    openSecond: (options) => PostgresLedger.open(database.connectionString, options),
    execRaw: async (sql) => {
      const client = new pg.Client({ connectionString: database.connectionString });
      await client.connect();
      try {
        await client.query(sql);
      } finally {
        await client.end();
      }
    },
    historyTable: 'closeout_ledger_status_history',
    cleanup: async () => {
      await ledger.dispose();
      await database.drop();
    },
  };
});

const T0 = 1_700_000_000_000;

function submission(recordId: string, idempotencyKey?: string) {
  return {
    recordId,
    endpoint: 'http://127.0.0.1:1/mcp',
    toolName: 'forecast',
    arguments: {},
    argumentsDigest: 'd',
    idempotencyKey,
    submittedAt: T0,
    leaseHolder: 'p1',
    leaseExpiresAt: T0 + 30_000,
  };
}

describe('PostgresLedger on its database', () => {
  let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
  let admin: pg.Client;
  const opened: PostgresLedger[] = [];

  async function open(connectionString = database.connectionString, options = {}): Promise<PostgresLedger> {
    const ledger = await PostgresLedger.open(connectionString, options);
    opened.push(ledger);
    return ledger;
  }

  /** The test's own connection; an outage cuts it, which must not become an uncaught error. */
  async function connectAdmin(): Promise<void> {
    admin = new pg.Client({ connectionString: database.connectionString });
    admin.on('error', () => undefined);
    await admin.connect();
  }

  beforeEach(async () => {
    database = await postgres.createDatabase();
    await connectAdmin();
  });

  afterEach(async () => {
    for (const ledger of opened.splice(0)) await ledger.dispose();
    await admin.end().catch(() => undefined);
    await database.drop();
  });

  it('migrates once when many workers open a fresh database at the same moment', async () => {
    // invariant: versioned migrations under an advisory lock: concurrent starts neither fail nor migrate twice
    await Promise.all(Array.from({ length: 8 }, () => open()));
    const { rows } = await admin.query<{ version: number }>(
      'SELECT version FROM closeout_ledger_schema_version ORDER BY version',
    );
    expect(rows.map((row) => row.version)).toEqual(
      Array.from({ length: POSTGRES_LEDGER_SCHEMA_VERSION }, (_, i) => i + 1),
    );
    await open();
    expect((await admin.query('SELECT version FROM closeout_ledger_schema_version')).rowCount).toBe(
      POSTGRES_LEDGER_SCHEMA_VERSION,
    );
  });

  it('refuses a database a newer build migrated, saying so', async () => {
    await open();
    await admin.query('INSERT INTO closeout_ledger_schema_version (version) VALUES ($1)', [
      POSTGRES_LEDGER_SCHEMA_VERSION + 1,
    ]);
    await expect(PostgresLedger.open(database.connectionString)).rejects.toThrow(/newer than this build/);
  });

  it('keeps the connection string password out of every error, its location and its logs', async () => {
    // invariant: the password never reaches a log or an error message
    const url = new URL(database.connectionString);
    const password = url.password;
    expect(password.length).toBeGreaterThan(8);
    const ledger = await open(database.connectionString, { onError: (error: Error) => logged.push(error) });
    const logged: Error[] = [];
    expect(ledger.location).not.toContain(password);
    expect(ledger.location).toContain('***');

    // a wrong password, a port where nothing listens, a database that does not exist
    for (const [target, shown] of await failingConnections(database.connectionString)) {
      const failure = await PostgresLedger.open(target, { connectionTimeoutMs: 3000 }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(Error);
      expect((failure as Error).message).toMatch(/^PostgreSQL ledger: migrate failed: /);
      expect(everythingShown(failure)).not.toContain(shown);
    }

    // an idle connection the database cuts is told to onError, without the password
    await ledger.list();
    await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    await vi.waitFor(() => expect(logged.length).toBeGreaterThan(0), { timeout: 10_000, interval: 20 });
    for (const error of logged) expect(everythingShown(error)).not.toContain(password);
  });

  it('lets more calls wait for a connection than its pool holds, and renews leases while they all wait', async () => {
    // invariant: waiting for a pooled connection is not a database failure (10,000 tasks and 8 polls in flight
    // once failed "timeout exceeded when trying to connect" on a pool of 5), and renewing the leases never queues
    // behind the other calls (docs/DESIGN.md, "Rules learned in the field", 3 and 8)
    const ledger = await open(database.connectionString, { maxConnections: 2, connectionTimeoutMs: 500 });
    await ledger.recordIntent({ ...submission('held'), leaseHolder: 'p2' });
    await ledger.recordIntent(submission('mine'));
    // another session holds the row: every write to it waits, holding its pooled connection meanwhile
    await admin.query('BEGIN');
    await admin.query(`SELECT record_id FROM closeout_ledger_submissions WHERE record_id = 'held' FOR UPDATE`);
    const writes = Array.from({ length: 12 }, (_, i) =>
      ledger.recordError('held', { kind: 'transport', message: `write ${i}`, at: T0 }).then(
        () => 'written',
        (error: unknown) => (error as Error).message,
      ),
    );
    // the queue outlasts the pool's connection timeout (500 ms) several times over
    await new Promise((resolve) => setTimeout(resolve, 2000));
    await ledger.renewLeases('p1', T0 + 60_000);
    await admin.query('COMMIT');
    expect(await Promise.all(writes)).toEqual(Array.from({ length: 12 }, () => 'written'));
    expect((await ledger.get('mine'))?.leaseExpiresAt).toBe(T0 + 60_000);
  });

  it('stamps a renewal held up behind a row lock for longer than a lease from when it ran, not from when it was sent', async () => {
    // RELIABILITY.md, "Stalled stores": a renewal computed at send time and queued behind another transaction's row
    // lock for longer than a lease landed already lapsed, and another worker could take the record
    const ledger = await open();
    const leaseMs = 1_000;
    await ledger.recordIntent({ ...submission('mine'), leaseExpiresAt: ledger.now() + leaseMs });
    await admin.query('BEGIN');
    await admin.query(`SELECT record_id FROM closeout_ledger_submissions WHERE record_id = 'mine' FOR UPDATE`);
    const renewal = ledger.renewLeases('p1', ledger.now() + leaseMs);
    // held for three leases
    await new Promise((resolve) => setTimeout(resolve, 3 * leaseMs));
    await admin.query('COMMIT');
    await renewal;
    const { rows } = await admin.query<{ ahead: number }>(
      `SELECT (lease_expires_at - (extract(epoch FROM clock_timestamp()) * 1000))::float8 AS ahead
       FROM closeout_ledger_submissions WHERE record_id = 'mine'`,
    );
    // a lease from when the renewal ran: most of a lease still ahead (before, two leases behind)
    expect(rows[0]!.ahead).toBeGreaterThan(leaseMs / 2);
    expect(rows[0]!.ahead).toBeLessThanOrEqual(leaseMs + 50);
  });

  it('fails a write during a database outage with a transient error, and works again after it', async () => {
    // invariant: a database blip is not a death (docs/DESIGN.md rule 3): the caller is told the write may succeed later
    const ledger = await open(database.connectionString, { connectionTimeoutMs: 2000 });
    await ledger.recordIntent(submission('before'));
    const outage = postgres.outage(3000);
    let failure: unknown;
    // an attempt may still land before the outage begins: each has its own record, and the one that failed must not
    let attempts = 0;
    await vi.waitFor(
      async () => {
        attempts += 1;
        failure = await ledger.recordIntent(submission(`during-${attempts}`)).then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(failure).toBeInstanceOf(Error);
      },
      { timeout: 10_000, interval: 50 },
    );
    expect((failure as Error).message).toMatch(/^PostgreSQL ledger: recordIntent failed: /);
    expect(isTransientStorageError(failure)).toBe(true);
    await outage;
    await admin.end().catch(() => undefined);
    await connectAdmin();
    await vi.waitFor(async () => expect((await ledger.recordIntent(submission('after'))).created).toBe(true), {
      timeout: 10_000,
      interval: 100,
    });
    const landed = (await ledger.list()).map((record) => record.recordId);
    expect(landed).toContain('before');
    expect(landed).toContain('after');
    expect(landed).not.toContain(`during-${attempts}`);
  });
});
