// A fleet of three client worker processes on one PostgreSQL ledger against a Closeout server (issue 17). One worker
// is SIGKILLed with one of its tasks waiting for input (its person never answered) and one working; the survivors
// take its records over by themselves (`takeOverEveryMs`) once its leases run out. Every task closes out once, in one worker; no input key is asked
// twice by the fleet except the one the dead worker's person never answered, asked again once (`previouslyAsked`).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const WORKER = fileURLToPath(new URL('./fixtures/fleetWorker.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'closeout-client-fleet-'));

interface FleetEvent {
  event: string;
  pid: number;
  taskId?: string;
  recordId?: string;
  key?: string;
  kind?: string;
  localState?: string;
  status?: string;
  previouslyAsked?: boolean;
}

let postgres: StartedPostgres;
let server: ServeProcess;
const children: ChildProcess[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
  server = await startServe(['--store', join(dir, 'server.db')]);
}, 120_000);

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await server?.stop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function startWorker(config: Record<string, unknown>, events: FleetEvent[]): ChildProcess {
  const child = spawn(process.execPath, [WORKER, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let buffer = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    for (let newline = buffer.indexOf('\n'); newline >= 0; newline = buffer.indexOf('\n')) {
      events.push(JSON.parse(buffer.slice(0, newline)) as FleetEvent);
      buffer = buffer.slice(newline + 1);
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => process.stderr.write(`[fleet worker ${child.pid}] ${chunk.toString()}`));
  return child;
}

describe('a client fleet on one PostgreSQL ledger', () => {
  it('closes out every task once when a worker is SIGKILLed mid-task', { timeout: 150_000 }, async () => {
    const database = await postgres.createDatabase();
    const events: FleetEvent[] = [];
    const base = { url: server.url, ledger: database.connectionString, leaseMs: 2_000, takeOverEveryMs: 300 };
    const callsOf = (name: string) => [
      { tool: 'batch_job', args: { items: 8, stepMs: 500 }, idempotencyKey: `${name}-batch` },
      { tool: 'approve_deploy', args: { env: name, deployMs: 100 }, idempotencyKey: `${name}-deploy` },
    ];
    const doomed = startWorker({ ...base, calls: callsOf('doomed'), hangInput: true }, events);
    const survivors = ['a', 'b'].map((name) => startWorker({ ...base, calls: callsOf(name) }, events));

    // the doomed worker has both tasks and its person is being asked: kill it there, mid-task
    await waitFor(
      'the doomed worker to be asked for its input',
      () => events.some((e) => e.pid === doomed.pid && e.event === 'asked') || undefined,
      60_000,
    );
    doomed.kill('SIGKILL');
    const doomedTasks = events.filter((e) => e.pid === doomed.pid && e.event === 'handle').map((e) => e.taskId!);
    expect(doomedTasks).toHaveLength(2);

    const allTasks = () => [...new Set(events.filter((e) => e.event === 'handle').map((e) => e.taskId!))];
    await waitFor(
      'every task of the fleet to close out',
      () => {
        const closed = new Set(events.filter((e) => e.event === 'closed').map((e) => e.taskId));
        return allTasks().length === 6 && allTasks().every((taskId) => closed.has(taskId)) ? true : undefined;
      },
      120_000,
    );
    for (const child of survivors) child.kill('SIGTERM');

    // every task closed out once, completed, in one worker: the dead worker's two in a survivor
    const outcomes = events.filter((e) => e.event === 'closed');
    expect(outcomes).toHaveLength(6);
    expect(new Set(outcomes.map((e) => e.taskId)).size).toBe(6);
    for (const outcome of outcomes) expect(outcome).toMatchObject({ localState: 'terminal', status: 'completed' });
    for (const taskId of doomedTasks) {
      expect(outcomes.find((e) => e.taskId === taskId)?.pid).not.toBe(doomed.pid);
    }
    // each input key asked once in the fleet; the unanswered one of the dead worker once more, saying so
    const asked = events.filter((e) => e.event === 'asked');
    const byTask = new Map<string, FleetEvent[]>();
    for (const e of asked) byTask.set(e.taskId!, [...(byTask.get(e.taskId!) ?? []), e]);
    expect(byTask.size).toBe(3);
    for (const [taskId, times] of byTask) {
      if (doomedTasks.includes(taskId)) {
        expect(times.map((e) => [e.pid === doomed.pid, e.previouslyAsked])).toEqual([
          [true, false],
          [false, true],
        ]);
      } else {
        expect(times).toHaveLength(1);
      }
    }
    // one record per idempotency key, all closed out, in the shared ledger
    const admin = new pg.Client({ connectionString: database.connectionString });
    await admin.connect();
    try {
      const { rows } = await admin.query<{ idempotency_key: string; local_state: string; n: string }>(
        `SELECT idempotency_key, local_state, COUNT(*) OVER (PARTITION BY idempotency_key) AS n
         FROM closeout_ledger_submissions ORDER BY idempotency_key`,
      );
      expect(rows).toHaveLength(6);
      for (const row of rows) expect(row).toMatchObject({ local_state: 'terminal', n: '1' });
    } finally {
      await admin.end();
    }
    await database.drop();
  });
});
