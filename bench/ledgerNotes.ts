/**
 * What a waiting poll writes to a SQLite ledger: its schedule note (Ledger.noteSchedule: the poll's time, the next
 * poll planned, the task's observed age), committed in batches. Schema 7 writes the notes to a narrow row of their own
 * (bench/RESULTS.md, section 33); before, each note rewrote the record's whole row, its arguments and their overflow
 * pages included, so a poll's write grew with what the call carried. Side by side in one run: for calls carrying
 * 40 B, 4 KiB and 16 KiB of arguments, the client CPU and the WAL bytes of a note, `--records` tasks followed and
 * `--batch` notes a commit (a client waiting on 10,000 tasks at `pollIntervalMs` 30 s notes 333 a second), over
 * `--rounds` commits, checkpointed in between. The SQLite ledger's default durability (`synchronous` full).
 *
 *   node dist/bench/bench/ledgerNotes.js [--smoke] [--records 2000] [--batch 333] [--rounds 30]
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import Database from 'better-sqlite3';
import { SqliteLedger } from 'closeout/client';

import { cpuNow, fixed, machineLine, median, table } from './figures.js';
import { positive } from './flags.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    records: { type: 'string' },
    batch: { type: 'string' },
    rounds: { type: 'string' },
  },
});
const records = positive(flags.records, flags.smoke ? 200 : 2000);
const batch = positive(flags.batch, flags.smoke ? 50 : 333);
const rounds = positive(flags.rounds, flags.smoke ? 4 : 30);
const ARGUMENT_SIZES = [40, 4096, 16_384];
const T0 = Date.now();
const HOLDER = 'bench';

/** Median client CPU µs and mean WAL bytes of one note, for calls carrying `padding` characters of arguments. */
async function notesOf(dir: string, padding: number): Promise<{ cpuUs: number; walBytes: number }> {
  const file = join(dir, `notes-${padding}.db`);
  const filling = new SqliteLedger(file, { synchronous: 'normal' });
  try {
    for (let i = 0; i < records; i++) {
      const recordId = `r${i}`;
      const args = { padding: 'x'.repeat(padding) };
      await filling.recordIntent({
        recordId,
        endpoint: 'http://127.0.0.1:1/mcp',
        toolName: 'bench',
        arguments: args,
        argumentsDigest: `digest-${i}`,
        submittedAt: T0,
        leaseHolder: HOLDER,
        leaseExpiresAt: T0 + 3_600_000,
      });
      const at = new Date(T0).toISOString();
      const task = { taskId: `t${i}`, status: 'working' as const, statusMessage: undefined, createdAt: at };
      await filling.commitTask(
        recordId,
        HOLDER,
        { ...task, lastUpdatedAt: at, ttlMs: null, pollIntervalMs: 30_000 },
        T0,
      );
    }
  } finally {
    await filling.dispose();
  }
  const ledger = new SqliteLedger(file);
  const raw = new Database(file);
  try {
    const cpu: number[] = [];
    let walBytes = 0;
    for (let round = 0; round < rounds; round++) {
      raw.pragma('wal_checkpoint(TRUNCATE)');
      const before = statSync(`${file}-wal`).size;
      const started = cpuNow();
      for (let i = 0; i < batch; i++) {
        const recordId = `r${(round * batch + i) % records}`;
        ledger.noteSchedule(recordId, HOLDER, { polledAt: T0 + round, observedAgeMs: round * 1_000 });
        ledger.noteSchedule(recordId, HOLDER, { nextPollAt: T0 + 30_000 + round });
      }
      // the next write carries the notes along; a renewal writes one small row of its own
      await ledger.renewLeases(HOLDER, T0 + 3_600_000);
      cpu.push((cpuNow() - started) / batch);
      walBytes += statSync(`${file}-wal`).size - before;
    }
    return { cpuUs: median(cpu), walBytes: walBytes / (rounds * batch) };
  } finally {
    raw.close();
    await ledger.dispose();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-ledger-notes-'));
try {
  console.log(`ledgerNotes · ${machineLine()}`);
  console.log(`${records} records followed, ${batch} schedule notes a commit, ${rounds} commits, synchronous full`);
  const results = new Map<number, { cpuUs: number; walBytes: number }>();
  for (const size of ARGUMENT_SIZES) results.set(size, await notesOf(dir, size));
  console.log(
    table(
      ['arguments', 'CPU µs/note', 'WAL B/note'],
      ARGUMENT_SIZES.map((size) => {
        const { cpuUs, walBytes } = results.get(size)!;
        return [`${size} B`, fixed(cpuUs, 1), fixed(walBytes, 0)];
      }),
    ),
  );
  const small = results.get(ARGUMENT_SIZES[0]!)!;
  const large = results.get(ARGUMENT_SIZES.at(-1)!)!;
  console.log(
    `16 KiB / 40 B arguments: CPU a note ${fixed(large.cpuUs / small.cpuUs, 2)}, WAL a note ${fixed(large.walBytes / small.walBytes, 2)}`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
