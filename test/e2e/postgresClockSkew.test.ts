// Two `closeout serve` instances on one PostgreSQL store whose hosts' wall clocks differ by two hours
// (docs/DESIGN.md, "Rules learned in the field", 2: never order or expire by comparing two hosts' wall clocks). Each
// instance used to stamp leases, creation times and expiry with its own clock: the instance ahead read the other's
// live leases as run out and took its tasks (a resumable one ran twice, a non-resumable one failed "interrupted by a
// server restart"), and it expired on read every task the other had created within the last two hours. The
// instances now keep every time the store holds on the database's clock. Real processes, the clock moved with
// libfaketime.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { fakeClock } from '../support/faketime.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';

const PER_INSTANCE = 3;
const TERMINAL = ['completed', 'failed', 'cancelled'];

let postgres: StartedPostgres;
const serves: ServeProcess[] = [];
const dir = mkdtempSync(join(tmpdir(), 'closeout-pg-skew-'));

beforeAll(async () => {
  postgres = await startPostgres();
}, 120_000);

afterAll(async () => {
  await Promise.all(serves.map((serve) => serve.stop()));
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('two instances on one PostgreSQL store, one host two hours ahead', () => {
  it('runs every task once on its first attempt and expires none', async () => {
    const database = await postgres.createDatabase();
    const runLog = join(dir, 'runs.jsonl');
    // a short lease, so each instance's sweep looks at the other's leases many times while the tasks run
    const args = ['--store', database.connectionString, '--lease-ms', '3000'];
    const onTime = await startServe(args, 30_000, { CLOSEOUT_RUN_LOG: runLog });
    serves.push(onTime);
    const ahead = await startServe(args, 30_000, { CLOSEOUT_RUN_LOG: runLog, ...fakeClock('+2h').env });
    serves.push(ahead);

    // tasks created on both instances, each running about 8 s: many lease periods, well inside the default 1 h TTL
    const taskIds: string[] = [];
    for (const serve of [onTime, ahead]) {
      for (let i = 0; i < PER_INSTANCE; i++) {
        for (const [name, args] of [
          ['batch_job', { items: 8, stepMs: 1000 }],
          ['export_report', { pages: 8, pageMs: 1000 }],
        ] as const) {
          const answer = await rpc(serve.url, 'tools/call', { name, arguments: args });
          expect(answer.error).toBeUndefined();
          taskIds.push(answer.result!['taskId'] as string);
        }
      }
    }

    // every task read through both instances until it ends (or the bound): an instance must never call another's
    // task expired, and a task taken back and forth between the instances never ends
    const finals = new Map<string, Record<string, unknown>>();
    const deadline = Date.now() + 90_000;
    while (finals.size < taskIds.length && Date.now() < deadline) {
      for (const taskId of taskIds.filter((t) => !finals.has(t))) {
        for (const serve of [ahead, onTime]) {
          const task = (await rpc(serve.url, 'tasks/get', { taskId })).result;
          if (task && TERMINAL.includes(task['status'] as string)) finals.set(taskId, task);
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const notCompleted = taskIds
      .map((taskId): Record<string, unknown> => ({ taskId, ...finals.get(taskId) }))
      .filter((task) => task['status'] !== 'completed')
      .map((task) => ({ taskId: task['taskId'], status: task['status'] ?? 'not ended in 90 s' }));
    expect(notCompleted).toEqual([]);

    const starts = readFileSync(runLog, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { taskId: string; attempt: number });
    expect(starts.filter((start) => start.attempt !== 1)).toEqual([]);
    expect(starts.length).toBe(taskIds.length);
    expect(new Set(starts.map((start) => start.taskId)).size).toBe(taskIds.length);
  }, 180_000);
});
