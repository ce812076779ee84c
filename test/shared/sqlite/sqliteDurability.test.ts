// Invariant (docs/DESIGN.md rule 4): by default an acknowledged commit of either SQLite file is on stable storage. Task
// creation and terminal results in the task store, the intent and the handle commit in the ledger: each is followed by
// an fsync of the WAL before the call returns. `synchronous: 'normal'` is the explicit faster choice: the WAL is then
// synced only at checkpoints. A power cut cannot be provoked here; what is checked is the system calls the process
// really makes, counted with strace on a real process (RELIABILITY.md, "Power loss, disk growth and a hostile server's
// text").
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const DIST = fileURLToPath(new URL('../../../dist', import.meta.url));
const HAS_STRACE = spawnSync('strace', ['-V']).status === 0;
const dir = mkdtempSync(join(tmpdir(), 'closeout-durability-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** How many commits each script makes after opening its file. */
const COMMITS = 40;

const STORE_SCRIPT = (synchronous: string, path: string) => `
  import { SqliteTaskStore } from ${JSON.stringify(join(DIST, 'server/store/sqliteTaskStore.js'))};
  // no background checkpoints: a checkpoint syncs too, and would be counted
  const store = new SqliteTaskStore(${JSON.stringify(path)}, { backgroundCheckpoints: false, ${synchronous} });
  for (let i = 0; i < ${COMMITS / 2}; i++) {
    const { task } = await store.create({ taskId: 't' + i, principal: 'alice', toolName: 'echo', arguments: {},
      createdAt: Date.now(), ttlMs: 60000, pollIntervalMs: 1000, resumable: false, leaseHolder: 'i',
      leaseExpiresAt: Date.now() + 60000 });
    await store.finish({ taskId: 't' + i, fence: task.fence }, { status: 'completed', result: { content: [] } }, Date.now());
  }
  await store.close();
`;

const LEDGER_SCRIPT = (synchronous: string, path: string) => `
  import { SqliteLedger } from ${JSON.stringify(join(DIST, 'client/ledger/sqliteLedger.js'))};
  const ledger = new SqliteLedger(${JSON.stringify(path)}, { ${synchronous} });
  for (let i = 0; i < ${COMMITS / 2}; i++) {
    const now = Date.now();
    await ledger.recordIntent({ recordId: 'r' + i, endpoint: 'http://127.0.0.1:1/mcp', toolName: 'echo', arguments: {},
      argumentsDigest: 'd' + i, submittedAt: now, leaseHolder: 'me', leaseExpiresAt: now + 60000 });
    const at = new Date(now).toISOString();
    await ledger.commitTask('r' + i, 'me', { taskId: 'task-' + i, status: 'working', statusMessage: undefined,
      createdAt: at, lastUpdatedAt: at, ttlMs: 60000, pollIntervalMs: 1000 }, now);
  }
  await ledger.dispose();
`;

/** fsync/fdatasync calls on the file's WAL made by a process running `script`. */
async function walSyncs(name: string, script: (synchronous: string, path: string) => string, synchronous: string) {
  if (!HAS_STRACE) throw new Error('strace is missing: scripts/install-test-tools.sh installs it');
  const path = join(dir, `${name}.db`);
  const log = join(dir, `${name}.strace`);
  await run(
    'strace',
    ['-f', '-qq', '-y', '-e', 'trace=fsync,fdatasync', '-o', log, process.execPath, '--input-type=module', '-e'].concat(
      script(synchronous, path),
    ),
    { timeout: 60_000 },
  );
  return readFileSync(log, 'utf8')
    .split('\n')
    .filter((line) => line.includes(`${path}-wal>`)).length;
}

describe('SQLite commits reach the disk', () => {
  for (const [what, script] of [
    ['task store', STORE_SCRIPT],
    ['ledger', LEDGER_SCRIPT],
  ] as const) {
    it(
      `${what}: every commit syncs the WAL by default; synchronous 'normal' does not`,
      { timeout: 120_000 },
      async () => {
        const name = what.replace(' ', '-');
        const [byDefault, full, normal] = await Promise.all([
          walSyncs(`${name}-default`, script, ''),
          walSyncs(`${name}-full`, script, "synchronous: 'full'"),
          walSyncs(`${name}-normal`, script, "synchronous: 'normal'"),
        ]);
        expect(byDefault).toBeGreaterThanOrEqual(COMMITS);
        expect(full).toBeGreaterThanOrEqual(COMMITS);
        expect(normal).toBeLessThan(COMMITS / 4);
      },
    );
  }
});
