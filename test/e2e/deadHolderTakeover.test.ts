// What a dead holder's tasks cost (docs/DESIGN.md, "Rules learned in the field", 11): a holder SIGKILLed where the
// kernel cannot prove it dead (in a PID namespace of its own, as in another container) is taken over by a taker that
// was already running, whose takeover gate is open, within two leases of the death: by a `closeout serve` on a SQLite
// and on a PostgreSQL task store, and by a client worker's take-over timer (`takeOverEveryMs`) on a SQLite and on a
// PostgreSQL ledger. Each case kills three holders in turn and prints what it measured (RELIABILITY.md quotes it).
// Real processes throughout: the holders, the takers, `closeout serve`, PostgreSQL.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { type Ledger, PostgresLedger, SqliteLedger } from '../../src/client/index.js';
import { FleetWorkers } from '../support/fleetWorkers.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { inNewPidNamespace, requirePidNamespaces } from '../support/processWrappers.js';
import { rpc } from '../support/rpc.js';
import { runsOf } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

const WORKER = fileURLToPath(new URL('./fixtures/clientWorker.mjs', import.meta.url));
/** The lease of every holder and taker here. */
const LEASE_MS = 2_000;
/** Holders killed per case. */
const KILLS = 3;

const dir = mkdtempSync(join(tmpdir(), 'closeout-dead-holder-'));
const runLog = join(dir, 'runs.jsonl');
const serving: ServeProcess[] = [];
const children: ChildProcess[] = [];
const fleet = new FleetWorkers();
let postgres: StartedPostgres;
let files = 0;

beforeAll(async () => {
  requirePidNamespaces();
  postgres = await startPostgres();
}, 120_000);

afterEach(async () => {
  await Promise.all(serving.splice(0).map((p) => p.kill()));
  for (const child of children.splice(0)) child.kill('SIGKILL');
  fleet.killAll();
});

afterAll(async () => {
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

async function serve(store: string, instance: string, launch?: (argv: string[]) => string[]): Promise<ServeProcess> {
  const p = await startServe(
    ['--store', store, '--lease-ms', String(LEASE_MS)],
    20_000,
    { CLOSEOUT_RUN_LOG: runLog, CLOSEOUT_RUN_INSTANCE: instance },
    launch,
  );
  serving.push(p);
  return p;
}

/** Wait until a taker started at `startedAt` has seen its store for two leases: its gate is open. */
async function warmedUp(startedAt: number): Promise<void> {
  await sleep(Math.max(0, startedAt + 2 * LEASE_MS - Date.now()));
}

/** Each delay, from a holder's SIGKILL to its task's takeover, is within two leases and is no proof's (over a third). */
function expectWithinTwoLeases(what: string, delays: number[]): void {
  console.log(`${what}: a dead holder's task taken over ${delays.map((ms) => `${ms} ms`).join(', ')} after the kill`);
  for (const delay of delays) {
    expect(delay).toBeGreaterThan(LEASE_MS / 3);
    expect(delay).toBeLessThanOrEqual(2 * LEASE_MS);
  }
}

describe('a dead holder taken over by a running instance', { timeout: 180_000 }, () => {
  const stores: Array<[string, () => Promise<string>]> = [
    ['SQLite', async () => join(dir, `store-${++files}.db`)],
    ['PostgreSQL', async () => (await postgres.createDatabase()).connectionString],
  ];

  it.each(stores)('%s task store: within two leases of the kill', async (name, location) => {
    const store = await location();
    const startedAt = Date.now();
    await serve(store, 'taker');
    const delays: number[] = [];
    for (let kill = 1; kill <= KILLS; kill += 1) {
      const holder = await serve(store, `holder-${kill}`, inNewPidNamespace);
      const created = await rpc(holder.url, 'tools/call', {
        name: 'batch_job',
        arguments: { items: 400, stepMs: 250 },
      });
      const taskId = created.result!['taskId'] as string;
      await waitFor('the holder to run the task', () => (runsOf(runLog, taskId).length > 0 ? true : undefined));
      await warmedUp(startedAt);
      const killedAt = Date.now();
      await holder.kill();
      const rerun = await waitFor(
        'the taker to run the task',
        () => runsOf(runLog, taskId).find((run) => run.instance === 'taker'),
        6 * LEASE_MS,
        20,
      );
      delays.push(rerun.at - killedAt);
    }
    expectWithinTwoLeases(`${name} task store, lease ${LEASE_MS} ms`, delays);
  });
});

describe('a dead holder taken over by a running client worker', { timeout: 180_000 }, () => {
  const ledgers: Array<[string, () => Promise<string>, (location: string) => Promise<Ledger>]> = [
    ['SQLite', async () => join(dir, `ledger-${++files}.db`), async (path) => new SqliteLedger(path)],
    [
      'PostgreSQL',
      async () => (await postgres.createDatabase()).connectionString,
      (url) => PostgresLedger.open(url) as Promise<Ledger>,
    ],
  ];

  it.each(ledgers)('%s ledger, the take-over timer: within two leases of the kill', async (name, location, open) => {
    const server = await serve(join(dir, `store-${++files}.db`), 'server');
    const ledger = await location();
    const startedAt = Date.now();
    // a worker of the fleet that follows nothing of its own and takes up what dead workers leave
    fleet.start(
      { url: server.url, ledger, leaseMs: LEASE_MS, takeOverEveryMs: LEASE_MS / 4, calls: [], stayAlive: true },
      [],
    );
    const reader = await open(ledger);
    const seen = new Set<string>();
    try {
      const delays: number[] = [];
      for (let kill = 1; kill <= KILLS; kill += 1) {
        const config = {
          mode: 'call',
          url: server.url,
          ledger,
          askedLog: join(dir, 'asked.log'),
          tool: 'batch_job',
          args: { items: 40, stepMs: 250 },
          correlationId: `holder-${kill}`,
          leaseMs: LEASE_MS,
        };
        const [command, ...args] = inNewPidNamespace([process.execPath, WORKER, JSON.stringify(config)]);
        const holder = spawn(command!, args, { stdio: ['ignore', 'ignore', 'inherit'] });
        children.push(holder);
        const record = await waitFor(
          'the holder’s record of its task',
          async () =>
            (await reader.list({})).find(
              (r) => r.taskId !== undefined && r.localState === 'tracking' && !seen.has(r.recordId),
            ),
          20_000,
        );
        seen.add(record.recordId);
        await warmedUp(startedAt);
        const killedAt = Date.now();
        holder.kill('SIGKILL');
        await waitFor(
          'the worker to take the record over',
          async () => {
            const now = await reader.get(record.recordId);
            return now?.leaseHolder !== undefined && now.leaseHolder !== record.leaseHolder ? true : undefined;
          },
          6 * LEASE_MS,
          20,
        );
        delays.push(Date.now() - killedAt);
      }
      expectWithinTwoLeases(`${name} ledger, lease ${LEASE_MS} ms, takeOverEveryMs ${LEASE_MS / 4}`, delays);
    } finally {
      await reader.dispose();
    }
  });
});
