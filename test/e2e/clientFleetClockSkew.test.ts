// A client fleet on one PostgreSQL ledger whose workers' wall clocks disagree (docs/DESIGN.md, "Rules
// learned in the field", 2: never order or expire by comparing two hosts' wall clocks). Worker A's clock is right,
// worker B's two hours ahead, worker C's four hours ahead. The workers used to stamp and compare ledger leases on their
// own clocks: B (and C) read every lease A stamped as run out and took A's live records over (a second worker asking
// a person for the same input, and the first worker's handle lost), and nobody took over a record C stamped before C
// died, its lease running out hours late by everybody else's clock. The leases are now on the database's clock. Real
// processes; the clocks moved with libfaketime.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { fakeClock } from '../support/faketime.js';
import { type FleetEvent, FleetWorkers } from '../support/fleetWorkers.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-fleet-skew-'));

let postgres: StartedPostgres;
let serve: ServeProcess;
const workers = new FleetWorkers();

beforeAll(async () => {
  postgres = await startPostgres();
  serve = await startServe(['--store', join(dir, 'server.db')]);
}, 120_000);

afterAll(async () => {
  workers.killAll();
  await serve?.stop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** Waits for `done` until the bound, and says whether it came: the assertions after it show what went wrong. */
async function settles(done: () => boolean, timeoutMs: number): Promise<boolean> {
  return waitFor('', () => (done() ? true : undefined), timeoutMs, 100).catch(() => false);
}

describe('a client fleet on one PostgreSQL ledger, its workers two and four hours apart', () => {
  it(
    'takes no record from a live worker, and takes a dead worker’s over once its lease ran out',
    { timeout: 240_000 },
    async () => {
      const database = await postgres.createDatabase();
      const events: FleetEvent[] = [];
      // short leases and frequent take-over ticks: each worker looks at the others' leases many times a second
      const base = { url: serve.url, ledger: database.connectionString, leaseMs: 2_000, takeOverEveryMs: 300 };
      const callsOf = (name: string) => [
        { tool: 'batch_job', args: { items: 10, stepMs: 500 }, idempotencyKey: `${name}-batch`, correlationId: name },
        // the person takes 1.5 s to answer: the worker asking holds the record's lease all along
        {
          tool: 'approve_deploy',
          args: { env: name, deployMs: 1000 },
          idempotencyKey: `${name}-deploy`,
          correlationId: `${name}-deploy`,
        },
      ];
      const a = workers.start({ ...base, calls: callsOf('a'), answerAfterMs: 1500, stayAlive: true }, events);
      const b = workers.start(
        { ...base, calls: callsOf('b'), answerAfterMs: 1500, stayAlive: true },
        events,
        fakeClock('+2h').env,
      );
      // C submits one long job and dies while it runs
      const cCall = { tool: 'batch_job', args: { items: 16, stepMs: 500 }, idempotencyKey: 'c-batch' };
      const c = workers.start({ ...base, calls: [cCall], stayAlive: true }, events, fakeClock('+4h').env);
      const cTask = await waitFor(
        'worker C to hold its task',
        () => events.find((e) => e.pid === c.pid && e.event === 'handle')?.taskId,
        60_000,
      );
      c.kill('SIGKILL');
      const killedAt = Date.now();

      const handles = () => events.filter((e) => e.event === 'handle');
      const closed = () => events.filter((e) => e.event === 'closed');
      const everyTaskClosed = () =>
        handles().length === 5 && handles().every((h) => closed().some((e) => e.taskId === h.taskId));
      await settles(everyTaskClosed, 120_000);
      const cClosed = closed().find((e) => e.taskId === cTask);
      for (const child of [a, b]) child.kill('SIGTERM');

      const closer = (taskId: string | undefined) =>
        closed()
          .filter((e) => e.taskId === taskId)
          .map((e) => (e.pid === a.pid ? 'A' : e.pid === b.pid ? 'B' : e.pid === c.pid ? 'C' : String(e.pid)));
      // every live worker closed out its own tasks, once, and lost none of its handles to another worker
      const own = handles()
        .filter((h) => h.pid !== c.pid)
        .map((h) => ({ key: h.key, closedBy: closer(h.taskId) }))
        .sort((x, y) => String(x.key).localeCompare(String(y.key)));
      expect.soft(own).toEqual(
        ['a-batch', 'a-deploy', 'b-batch', 'b-deploy'].map((key) => ({
          key,
          closedBy: [key.startsWith('a') ? 'A' : 'B'],
        })),
      );
      expect.soft(events.filter((e) => e.event === 'not-closed')).toEqual([]);
      // each input key asked once in the fleet, by the worker that submitted the task
      const asked = events
        .filter((e) => e.event === 'asked')
        .map((e) => ({ correlationId: e.correlationId, by: e.pid === a.pid ? 'A' : 'B' }));
      expect.soft(asked.sort((x, y) => String(x.correlationId).localeCompare(String(y.correlationId)))).toEqual([
        { correlationId: 'a-deploy', by: 'A' },
        { correlationId: 'b-deploy', by: 'B' },
      ]);
      // the dead worker's task: taken over by a survivor once its 2 s lease ran out (not four hours later), and
      // completed
      expect(
        cClosed,
        `worker C's task ${cTask} closed out ${Math.round((Date.now() - killedAt) / 1000)} s after the kill`,
      ).toMatchObject({ localState: 'terminal', status: 'completed' });
      expect(['A', 'B']).toContain(closer(cTask)[0]);
      expect(closer(cTask)).toHaveLength(1);
      await database.drop();
    },
  );
});
