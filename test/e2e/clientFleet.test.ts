// A fleet of three client worker processes on one PostgreSQL ledger against two `closeout serve` instances on one
// PostgreSQL store behind a round-robin proxy. One worker is SIGKILLed mid-task with three tasks open: one
// waiting for input its person never answered, one whose input it answered (deploying now), one working. The
// survivors take its records over by themselves (`takeOverEveryMs`) once its leases run out. Every task closes out
// once, in one worker; every handler ran once on the servers; no input key is asked twice by the fleet, except the
// one the dead worker's person never answered, asked again once and saying so (`previouslyAsked`).
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { PostgresLedger } from '../../src/client/index.js';
import { type FleetEvent, FleetWorkers } from '../support/fleetWorkers.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { RoundRobinProxy } from '../support/roundRobinProxy.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-client-fleet-'));
const runLog = join(dir, 'runs.log');

let postgres: StartedPostgres;
let store: { connectionString: string; drop: () => Promise<void> };
const instances: ServeProcess[] = [];
let proxy: RoundRobinProxy;
let url: string;
const workers = new FleetWorkers();

beforeAll(async () => {
  postgres = await startPostgres();
  store = await postgres.createDatabase();
  for (let i = 0; i < 2; i++) {
    instances.push(await startServe(['--store', store.connectionString], 15_000, { CLOSEOUT_RUN_LOG: runLog }));
  }
  proxy = new RoundRobinProxy(instances.map((instance) => instance.url));
  url = await proxy.listen();
}, 120_000);

afterAll(async () => {
  workers.killAll();
  proxy?.close();
  await Promise.all(instances.map((instance) => instance.stop()));
  await store?.drop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('a client fleet on one PostgreSQL ledger, against two server instances', () => {
  it(
    'closes out every task once and asks nothing twice when a worker is SIGKILLed mid-task',
    { timeout: 180_000 },
    async () => {
      const database = await postgres.createDatabase();
      const events: FleetEvent[] = [];
      const base = { url, ledger: database.connectionString, leaseMs: 2_000, takeOverEveryMs: 300 };
      const survivorCalls = (name: string) => [
        {
          tool: 'batch_job',
          args: { items: 8, stepMs: 500 },
          idempotencyKey: `${name}-batch`,
          correlationId: `${name}-batch`,
        },
        {
          tool: 'approve_deploy',
          args: { env: name, deployMs: 100 },
          idempotencyKey: `${name}-deploy`,
          correlationId: `${name}-deploy`,
        },
      ];
      const doomedCalls = [
        {
          tool: 'batch_job',
          args: { items: 16, stepMs: 500 },
          idempotencyKey: 'doomed-batch',
          correlationId: 'doomed-batch',
        },
        // deploys for long after its approval: still working when its worker dies
        {
          tool: 'approve_deploy',
          args: { env: 'doomed-answered', deployMs: 10_000 },
          idempotencyKey: 'doomed-answered',
          correlationId: 'doomed-answered',
        },
        {
          tool: 'approve_deploy',
          args: { env: 'doomed-walked-away', deployMs: 100 },
          idempotencyKey: 'doomed-walked-away',
          correlationId: 'doomed-walked-away',
        },
      ];
      const doomed = workers.start({ ...base, calls: doomedCalls, hangInputFor: ['doomed-walked-away'] }, events);
      const survivors = ['a', 'b'].map((name) => workers.start({ ...base, calls: survivorCalls(name) }, events));

      // kill the doomed worker while its person is being asked, its answered deploy is deploying, its batch working
      const doomedTask = (correlationId: string) =>
        events.find((e) => e.pid === doomed.pid && e.event === 'handle' && e.key === correlationId)?.taskId;
      await waitFor(
        'the doomed worker to be asked for its input and to have delivered the other answer',
        async () => {
          if (
            !events.some((e) => e.pid === doomed.pid && e.event === 'asked' && e.correlationId === 'doomed-walked-away')
          ) {
            return undefined;
          }
          const answered = doomedTask('doomed-answered');
          if (answered === undefined) return undefined;
          const task = (await rpc(url, 'tasks/get', { taskId: answered })).result;
          return task?.['statusMessage'] === 'Deploying to doomed-answered' ? true : undefined;
        },
        90_000,
      );
      doomed.kill('SIGKILL');
      const doomedTasks = doomedCalls.map((call) => doomedTask(call.correlationId)!);
      for (const taskId of doomedTasks) {
        const task = (await rpc(url, 'tasks/get', { taskId })).result;
        expect(['working', 'input_required'], `${taskId} open when its worker died`).toContain(task?.['status']);
      }

      const allTasks = () => [...new Set(events.filter((e) => e.event === 'handle').map((e) => e.taskId!))];
      await waitFor(
        'every task of the fleet to close out',
        () => {
          const closed = new Set(events.filter((e) => e.event === 'closed').map((e) => e.taskId));
          return allTasks().length === 7 && allTasks().every((taskId) => closed.has(taskId)) ? true : undefined;
        },
        150_000,
      );
      for (const child of survivors) child.kill('SIGTERM');

      // every task closed out once, completed, in one worker: the dead worker's three in the survivors
      const outcomes = events.filter((e) => e.event === 'closed');
      expect(outcomes).toHaveLength(7);
      expect(new Set(outcomes.map((e) => e.taskId)).size).toBe(7);
      for (const outcome of outcomes) expect(outcome).toMatchObject({ localState: 'terminal', status: 'completed' });
      for (const taskId of doomedTasks) {
        expect(outcomes.find((e) => e.taskId === taskId)?.pid).not.toBe(doomed.pid);
      }
      // each input key handed to a handler once in the fleet (the answered one of the dead worker too); the one its
      // person never answered once more, in a survivor, saying so
      const asked = events.filter((e) => e.event === 'asked');
      const byKey = new Map<string, FleetEvent[]>();
      for (const e of asked) byKey.set(`${e.taskId!}/${e.key!}`, [...(byKey.get(`${e.taskId!}/${e.key!}`) ?? []), e]);
      expect(byKey.size).toBe(4);
      for (const times of byKey.values()) {
        if (times[0]!.correlationId === 'doomed-walked-away') {
          expect(times.map((e) => [e.pid === doomed.pid, e.previouslyAsked])).toEqual([
            [true, false],
            [false, true],
          ]);
        } else {
          expect(times, JSON.stringify(times)).toHaveLength(1);
        }
      }
      // the servers ran each handler once: no instance died, and a worker's death re-runs nothing
      const runs = existsSync(runLog)
        ? readFileSync(runLog, 'utf8')
            .split('\n')
            .filter((line) => line !== '')
            .map((line) => JSON.parse(line) as { taskId: string })
        : [];
      for (const taskId of allTasks())
        expect(
          runs.filter((run) => run.taskId === taskId),
          taskId,
        ).toHaveLength(1);
      // both instances served the fleet
      expect(proxy.served.every((count) => count > 0)).toBe(true);

      // one record per idempotency key, all closed out, in the shared ledger; each input answered and stored once
      const ledger = await PostgresLedger.open(database.connectionString);
      try {
        const records = await ledger.list({});
        expect(records.map((r) => r.idempotencyKey).sort()).toEqual(
          [...doomedCalls, ...survivorCalls('a'), ...survivorCalls('b')].map((call) => call.idempotencyKey).sort(),
        );
        for (const record of records) {
          expect(record.localState).toBe('terminal');
          for (const input of record.inputs) expect(input.response, record.idempotencyKey).toBeDefined();
        }
      } finally {
        await ledger.dispose();
      }
      await database.drop();
    },
  );
});
