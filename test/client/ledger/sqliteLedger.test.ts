// Invariants: the SQLite ledger passes the one Ledger contract (src/testing/ledgerContract.ts); its file is
// owner-only, in WAL mode and versioned, and a file written by a newer schema is refused.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { NewSubmission } from '../../../src/client/index.js';
import { SqliteLedger } from '../../../src/client/index.js';
import { LEDGER_SCHEMA_VERSION } from '../../../src/client/ledger/sqlite/schema.js';
import { argumentsDigest } from '../../../src/client/submitting/argumentsDigest.js';
import { openDatabase } from '../../../src/shared/sqlite/sqliteDriver.js';
import { describeLedgerContract } from '../../../src/testing/index.js';

describeLedgerContract('SqliteLedger', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-ledger-'));
  const path = join(dir, 'ledger.db');
  const ledger = new SqliteLedger(path);
  return {
    ledger,
    openSecond: async (options) => new SqliteLedger(path, options),
    execRaw: async (sql) => {
      const raw = openDatabase(path);
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
    const raw = openDatabase(path, { readonly: true });
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
    const raw = openDatabase(path);
    raw.pragma(`user_version = ${LEDGER_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => new SqliteLedger(path)).toThrow(/newer than this build/);
    ledger = new SqliteLedger(join(dir, 'other.db'));
  });
});

describe('SqliteLedger leases', () => {
  // docs/DESIGN.md, "Rules learned in the field", 8: what a renewal costs must not grow with the leases held. A renewal
  // that rewrote every record it held wrote each whole row (arguments, result and all) to the WAL: about 7 MB every
  // leaseMs / 3 for 10,000 open tasks (bench/RESULTS.md, the resume of 10,000 records).
  it('renews every lease of a holder by writing the same few pages whether it holds 10 records or 500', async () => {
    const walBytesOfRenewal = (held: number) =>
      walBytesOf(
        join(dir, `held-${held}.db`),
        (holding) => following(holding, 'held', held, 400),
        async (holding) => {
          await holding.renewLeases('p1', T0 + 60_000);
          expect((await holding.get('held-0'))?.leaseExpiresAt).toBe(T0 + 60_000);
        },
      );
    const few = await walBytesOfRenewal(10);
    const many = await walBytesOfRenewal(500);
    // before: 10 records 8 KB, 2,000 records 1.4 MB
    expect(many, `WAL bytes of one renewal: ${few} holding 10, ${many} holding 500`).toBeLessThanOrEqual(few);
  });

  it('keeps a record its holder renews out of every other process’s reach, however old its own lease', async () => {
    await ledger.recordIntent(submission({ recordId: 'old', leaseExpiresAt: T0 + 1_000 }));
    await ledger.commitTask('old', 'p1', observed('task-old'), T0, T0 + 1_000);
    const other = new SqliteLedger(path);
    try {
      await ledger.renewLeases('p1', T0 + 50_000);
      expect(await ledger.get('old')).toMatchObject({ leaseHolder: 'p1', leaseExpiresAt: T0 + 50_000 });
      expect(await other.list({ claimableAt: T0 + 49_999 })).toEqual([]);
      expect(await other.claim('old', 'p2', T0 + 90_000, T0 + 49_999)).toBe(false);
      // the holder stops renewing: at its last renewal's end the record is free for the taking
      expect((await other.list({ claimableAt: T0 + 50_001 })).map((record) => record.recordId)).toEqual(['old']);
      expect(await other.claim('old', 'p2', T0 + 90_000, T0 + 50_001)).toBe(true);
      // a renewal of the holder that lost it changes nothing of the record now
      await ledger.renewLeases('p1', T0 + 200_000);
      expect(await other.get('old')).toMatchObject({ leaseHolder: 'p2', leaseExpiresAt: T0 + 90_000 });
    } finally {
      await other.dispose();
    }
  });

  // The host's wall clock stepped back an hour (an NTP correction) while p1 held records it had claimed on the clock
  // ahead: a renewal sets p1's leases to its end, as it did when it rewrote each record (Ledger.renewLeases), so once
  // p1 is killed its records are taken over a lease later, not an hour later.
  it('lets a renewal after the clock stepped back end the leases its holder claimed on the clock ahead', async () => {
    const ahead = T0 + 3_600_000;
    await ledger.recordIntent(submission({ recordId: 'sent', submittedAt: ahead, leaseExpiresAt: ahead + 30_000 }));
    await ledger.commitTask('sent', 'p1', observed('task-sent'), ahead, ahead + 30_000);
    await ledger.recordIntent(submission({ recordId: 'resumed', submittedAt: ahead, leaseExpiresAt: ahead + 30_000 }));
    await ledger.commitTask('resumed', 'p1', observed('task-resumed'), ahead, ahead + 30_000);
    await ledger.detach('resumed', 'p1', ahead);
    expect(await ledger.claim('resumed', 'p1', ahead + 30_000, ahead)).toBe(true);
    const other = new SqliteLedger(path);
    try {
      // the clock is back at T0; p1 renews once, then is killed
      await ledger.renewLeases('p1', T0 + 30_000);
      for (const recordId of ['sent', 'resumed']) {
        expect(await other.get(recordId)).toMatchObject({ leaseHolder: 'p1', leaseExpiresAt: T0 + 30_000 });
      }
      expect(await other.list({ claimableAt: T0 + 29_999 })).toEqual([]);
      expect((await other.list({ claimableAt: T0 + 30_001 })).map((record) => record.recordId).sort()).toEqual([
        'resumed',
        'sent',
      ]);
      expect(await other.claimAll(['sent', 'resumed'], 'p2', T0 + 90_000, T0 + 30_001)).toEqual(['sent', 'resumed']);
    } finally {
      await other.dispose();
    }
  });

  it('gives a record its claim’s lease even when its holder’s last renewal ended before', async () => {
    for (const recordId of ['one', 'many']) {
      await ledger.recordIntent(submission({ recordId, leaseHolder: 'p0' }));
      await ledger.commitTask(recordId, 'p0', observed(`task-${recordId}`), T0, T0 + 30_000);
      await ledger.detach(recordId, 'p0', T0);
    }
    // p1's and p3's renewals stopped long ago (the ledger was locked past them, say); they claim now, at T0 + 50 s
    await ledger.renewLeases('p1', T0 + 1_000);
    await ledger.renewLeases('p3', T0 + 1_000);
    expect(await ledger.claim('one', 'p1', T0 + 80_000, T0 + 50_000)).toBe(true);
    expect(await ledger.claimAll(['many'], 'p3', T0 + 80_000, T0 + 50_000)).toEqual(['many']);
    const other = new SqliteLedger(path);
    try {
      expect(await other.claimAll(['one', 'many'], 'p2', T0 + 90_000, T0 + 50_001)).toEqual([]);
      expect(await other.get('one')).toMatchObject({ leaseHolder: 'p1', leaseExpiresAt: T0 + 80_000 });
      expect(await other.get('many')).toMatchObject({ leaseHolder: 'p3', leaseExpiresAt: T0 + 80_000 });
    } finally {
      await other.dispose();
    }
  });

  it('takes an abandoned submission for dead only once its holder stopped renewing', async () => {
    await ledger.recordIntent(submission({ recordId: 'sending', leaseExpiresAt: T0 + 1_000 }));
    await ledger.renewLeases('p1', T0 + 50_000);
    const endpoint = 'http://127.0.0.1:1/mcp';
    expect(await ledger.settleAbandonedSubmissions(endpoint, T0 + 49_999, 'found on resume')).toEqual([]);
    expect(
      (await ledger.settleAbandonedSubmissions(endpoint, T0 + 50_001, 'found on resume')).map((r) => r.recordId),
    ).toEqual(['sending']);
  });
});

// A process of a build before ledger schema 5, still running when a newer build migrated the file, claims as it always
// did: on the record's own lease, which a holder of this build no longer rewrites when it renews. Its claim statement,
// as that build (7f9f229) prepared it, must not take a record whose holder renews (RELIABILITY.md, "Liveness of a
// lease holder"): run through another connection to the file, as that process would.
describe('SqliteLedger leases and a process of the build before schema 5', () => {
  const OLD_CLAIM = `UPDATE submissions SET lease_owner = @holder, lease_expires_at = @leaseExpiresAt,
       local_state = CASE local_state WHEN 'detached' THEN 'tracking' ELSE local_state END
     WHERE record_id = @recordId AND local_state IN ('tracking','detached')
       AND (lease_owner IS NULL OR lease_owner = @holder OR lease_expires_at < @now)`;

  it('cannot take a record its holder renews, and takes it once the holder stopped renewing', async () => {
    // claimed two minutes ago, renewed since: the record's own lease ran out a minute ago
    const claimedAt = Date.now() - 120_000;
    await ledger.recordIntent(
      submission({ recordId: 'held', submittedAt: claimedAt, leaseHolder: 'new', leaseExpiresAt: claimedAt + 60_000 }),
    );
    await ledger.commitTask('held', 'new', observed('task-held'), claimedAt, claimedAt + 60_000);
    await ledger.renewLeases('new', Date.now() + 60_000);
    const old = openDatabase(path);
    try {
      const claim = old.prepare(OLD_CLAIM);
      const oldClaim = () => {
        const now = Date.now();
        return claim.run({ recordId: 'held', holder: 'old', leaseExpiresAt: now + 60_000, now }).changes;
      };
      expect(oldClaim()).toBe(0);
      expect(await ledger.get('held')).toMatchObject({ leaseHolder: 'new', localState: 'tracking' });
      expect(await ledger.isTrackedBy('held', 'new')).toBe(true);
      // the holder renews a last time, for 200 ms, and stops: then the old process takes the record over
      await ledger.renewLeases('new', Date.now() + 200);
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && (await ledger.get('held'))!.leaseExpiresAt! >= Date.now()) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(oldClaim()).toBe(1);
      expect((await ledger.get('held'))?.leaseHolder).toBe('old');
    } finally {
      old.close();
    }
  });
});

describe('SqliteLedger schedule notes', () => {
  // A waiting poll's one write is its schedule note (Ledger.noteSchedule). Written into the record's row, it rewrote
  // the whole row, arguments and all, once a poll: its cost grew with what the call carried (bench/RESULTS.md, section
  // 33). Schema 7 gives the notes a narrow row of their own.
  it('writes the notes of 50 polls to the same few pages whether the calls carried 40 bytes or 16 KB', async () => {
    const walBytesOfNotes = (padding: number) =>
      walBytesOf(
        join(dir, `notes-${padding}.db`),
        (holding) => following(holding, 'waiting', 50, padding),
        async (holding, file) => {
          for (let i = 0; i < 50; i++) {
            holding.noteSchedule(`waiting-${i}`, 'p1', {
              polledAt: T0 + 1_000,
              nextPollAt: T0 + 2_000,
              observedAgeMs: 1_000,
            });
          }
          // the next write carries the notes along; a renewal writes one small row of its own
          await holding.renewLeases('p1', T0 + 60_000);
          const committed = new SqliteLedger(file);
          try {
            expect(await committed.get('waiting-49')).toMatchObject({
              lastPollAt: T0 + 1_000,
              nextPollAt: T0 + 2_000,
              observedAgeMs: 1_000,
            });
          } finally {
            await committed.dispose();
          }
        },
      );
    const small = await walBytesOfNotes(40);
    const large = await walBytesOfNotes(16_384);
    // before schema 7: 37 KB with 40-byte arguments, 865 KB with 16 KB (each note rewrote its record and overflow pages)
    expect(large, `WAL bytes of 50 notes: ${small} with 40-byte arguments, ${large} with 16 KB`).toBeLessThanOrEqual(
      small,
    );
  });

  it('reads the later poll, the longer age and the next poll noted in the row by a build before schema 7', async () => {
    await ledger.recordIntent(submission({ recordId: 'mixed' }));
    await ledger.commitTask('mixed', 'p1', observed('task-mixed'), T0);
    ledger.noteSchedule('mixed', 'p1', { polledAt: T0 + 100, nextPollAt: T0 + 1_100, observedAgeMs: 500 });
    await ledger.renewLeases('p1', T0 + 60_000);
    const old = openDatabase(path);
    try {
      // what a build before schema 7 writes for its note: the record's own columns
      const oldNote = old.prepare(
        `UPDATE submissions SET last_poll_at = ?, next_poll_at = ?, observed_age_ms = ?, updated_at = ?
         WHERE record_id = 'mixed'`,
      );
      // what the older build writes (poll, next poll, age), and what a read then says: the later and the longer
      const cases = [
        { written: [T0 + 50, T0 + 1_050, 700], read: [T0 + 100, T0 + 1_100, 700] },
        { written: [T0 + 200, T0 + 1_200, 800], read: [T0 + 200, T0 + 1_200, 800] },
      ] as const;
      for (const { written, read } of cases) {
        oldNote.run(written[0], written[1], written[2], written[0]);
        expect(await ledger.get('mixed')).toMatchObject({
          lastPollAt: read[0],
          nextPollAt: read[1],
          observedAgeMs: read[2],
          updatedAt: read[0],
        });
      }
    } finally {
      old.close();
    }
  });

  it('plans no next poll for a record that stopped being tracked, until its next holder notes one', async () => {
    await ledger.recordIntent(submission({ recordId: 'paused' }));
    await ledger.commitTask('paused', 'p1', observed('task-paused'), T0);
    ledger.noteSchedule('paused', 'p1', { polledAt: T0 + 100, nextPollAt: T0 + 1_100 });
    await ledger.renewLeases('p1', T0 + 60_000);
    expect((await ledger.get('paused'))?.nextPollAt).toBe(T0 + 1_100);
    expect(await ledger.detach('paused', 'p1', T0 + 200)).toBe(true);
    expect(await ledger.get('paused')).toMatchObject({ localState: 'detached', nextPollAt: undefined });
    expect(await ledger.claimAll(['paused'], 'p2', T0 + 60_000, T0 + 300)).toEqual(['paused']);
    expect(await ledger.get('paused')).toMatchObject({ localState: 'tracking', nextPollAt: undefined });
    ledger.noteSchedule('paused', 'p2', { nextPollAt: T0 + 1_300 });
    await ledger.renewLeases('p2', T0 + 60_000);
    const other = new SqliteLedger(path);
    try {
      expect(await other.get('paused')).toMatchObject({ lastPollAt: T0 + 100, nextPollAt: T0 + 1_300 });
    } finally {
      await other.dispose();
    }
  });
});

describe('SqliteLedger group commit', () => {
  /** Frames in the write-ahead log since `walFrames` last truncated it (one commit writes each page it changed once). */
  const walFrames = (db: Database.Database, mode: 'PASSIVE' | 'TRUNCATE') =>
    (db.pragma(`wal_checkpoint(${mode})`) as Array<{ log: number }>)[0]!.log;

  // every commit is an fsync at synchronous=FULL: a burst of submissions wrote three each (intent, sent, taskId), and
  // spent most of its CPU in them (bench/RESULTS.md, section 27)
  it('commits the writes of one turn of the event loop in one transaction', async () => {
    const observer = openDatabase(path);
    try {
      walFrames(observer, 'TRUNCATE');
      const ids = Array.from({ length: 16 }, (_, i) => `burst-${i}`);
      await Promise.all(ids.map((recordId) => ledger.recordIntent(submission({ recordId }))));
      const afterIntents = walFrames(observer, 'PASSIVE');
      await Promise.all(ids.map((recordId) => ledger.markSent(recordId, 'p1', T0 + 1)));
      const afterSent = walFrames(observer, 'PASSIVE') - afterIntents;
      // one commit per write wrote at least one frame each (three pages an intent: row, history, holder)
      expect(afterIntents).toBeLessThan(16);
      expect(afterSent).toBeLessThan(16);
      expect((await ledger.list()).filter((record) => record.sentAt === T0 + 1)).toHaveLength(16);
    } finally {
      observer.close();
    }
  });

  it('refuses one write of a group alone: the others of its turn are committed', async () => {
    await ledger.recordIntent(submission({ recordId: 'old' }));
    const outcomes = await Promise.allSettled([
      ledger.recordIntent(submission({ recordId: 'first' })),
      // no such record: this write throws inside its own savepoint
      ledger.recordResubmission('missing', submission({ recordId: 'never' })),
      // a lease this process does not hold: answered false, nothing written
      ledger.markSent('old', 'someone-else', T0 + 1),
      ledger.markSent('old', 'p1', T0 + 2),
      ledger.recordIntent(submission({ recordId: 'last' })),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled']);
    expect(String((outcomes[1] as PromiseRejectedResult).reason)).toMatch(/no ledger record missing/);
    expect(outcomes.slice(2, 4).map((o) => (o as PromiseFulfilledResult<boolean>).value)).toEqual([false, true]);
    await ledger.dispose();
    ledger = new SqliteLedger(path);
    expect((await ledger.list()).map((record) => record.recordId).sort()).toEqual(['first', 'last', 'old']);
    expect((await ledger.get('old'))?.sentAt).toBe(T0 + 2);
  });

  it('runs a group again one write per transaction when one write rolls the whole transaction back', async () => {
    // as a full disk may at the commit: a small write of the same turn (an immediate result's close-out) must not be
    // lost with a large one, nor stored while its caller is told it failed
    await ledger.recordIntent(submission({ recordId: 'small' }));
    const other = openDatabase(path);
    try {
      other.exec(`CREATE TRIGGER whole_rollback BEFORE INSERT ON submissions WHEN NEW.record_id = 'rolls-back'
                  BEGIN SELECT RAISE(ROLLBACK, 'the whole transaction rolled back'); END`);
      const outcomes = await Promise.allSettled([
        ledger.recordIntent(submission({ recordId: 'before' })),
        ledger.recordIntent(submission({ recordId: 'rolls-back' })),
        ledger.closeOut('small', 'p1', { localState: 'terminal', reason: 'immediate result', result: {} }, T0 + 1),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect(String((outcomes[1] as PromiseRejectedResult).reason)).toMatch(/the whole transaction rolled back/);
      expect((outcomes[2] as PromiseFulfilledResult<boolean>).value).toBe(true);
      const stored = (recordId: string) =>
        other.prepare('SELECT local_state FROM submissions WHERE record_id = ?').get(recordId);
      expect([stored('before'), stored('rolls-back'), stored('small')]).toEqual([
        { local_state: 'submitting' },
        undefined,
        { local_state: 'terminal' },
      ]);
      // each write once: one history line for the intent that was run twice
      expect(other.prepare(`SELECT COUNT(*) AS n FROM status_history WHERE record_id = 'before'`).get()).toEqual({
        n: 1,
      });
    } finally {
      other.close();
    }
  });

  it('commits the writes asked for before dispose(), in the same turn, before the file closes', async () => {
    const asked = ledger.recordIntent(submission({ recordId: 'just-before' }));
    await ledger.dispose();
    expect((await asked).created).toBe(true);
    ledger = new SqliteLedger(path);
    expect((await ledger.get('just-before'))?.localState).toBe('submitting');
  });

  it('fails every write of a group whose commit cannot take the lock, and stores none of them', async () => {
    const busy = new SqliteLedger(path, { busyTimeoutMs: 100 });
    const holder = openDatabase(path);
    try {
      holder.prepare('BEGIN IMMEDIATE').run();
      const outcomes = await Promise.allSettled([
        busy.recordIntent(submission({ recordId: 'blocked-1' })),
        busy.recordIntent(submission({ recordId: 'blocked-2' })),
      ]);
      holder.prepare('ROLLBACK').run();
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
      expect(String((outcomes[0] as PromiseRejectedResult).reason)).toMatch(/locked|busy/i);
      expect(await busy.get('blocked-1')).toBeUndefined();
      expect(await busy.get('blocked-2')).toBeUndefined();
    } finally {
      holder.close();
      await busy.dispose();
    }
  });
});

/** `count` records `${prefix}-${i}` that `p1` follows, each call carrying `padding` characters of arguments. */
async function following(ledger: SqliteLedger, prefix: string, count: number, padding: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const recordId = `${prefix}-${i}`;
    await ledger.recordIntent(submission({ recordId, arguments: { city: 'Oslo', padding: 'x'.repeat(padding) } }));
    await ledger.commitTask(recordId, 'p1', observed(`task-${i}`), T0);
  }
}

/**
 * The WAL bytes `write` adds to a ledger file that `fill` filled, checkpointed in between. The fill commits without
 * fsync: what one write adds to the WAL does not depend on it.
 */
async function walBytesOf(
  file: string,
  fill: (ledger: SqliteLedger) => Promise<void>,
  write: (ledger: SqliteLedger, file: string) => Promise<void>,
): Promise<number> {
  const ledger = new SqliteLedger(file, { synchronous: 'normal' });
  try {
    await fill(ledger);
    const raw = openDatabase(file);
    try {
      raw.pragma('wal_checkpoint(TRUNCATE)');
      await write(ledger, file);
      return statSync(`${file}-wal`).size;
    } finally {
      raw.close();
    }
  } finally {
    await ledger.dispose();
  }
}

function observed(taskId: string) {
  return {
    taskId,
    status: 'working' as const,
    statusMessage: undefined,
    createdAt: new Date(T0).toISOString(),
    lastUpdatedAt: new Date(T0).toISOString(),
    ttlMs: 3_600_000,
    pollIntervalMs: 1_000,
  };
}
