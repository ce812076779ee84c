// Durable steps over real processes (RELIABILITY.md, "Durable steps"): `closeout serve` is SIGKILLed at a step boundary
// of a demo tool, on SQLite (then restarted on the same file) and on PostgreSQL (two instances, the survivor takes
// over), and the task ends as it would have without the kill:
// - render_job killed after its external job started but before the step committed: the step's function runs again in
//   the next attempt (it is not stored), and the job API's idempotency key hands back the same job, never a second;
// - render_job killed after the step committed: the function never runs again, the same job is followed;
// - batch_job killed between two checkpoint commits: the next attempt goes on from the last item committed, so each
//   item is processed once apart from the one in flight at the kill.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import type { TaskStore } from '../../src/server/store/taskStore.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const LEASE_MS = 1500;
const dir = mkdtempSync(join(tmpdir(), 'closeout-durable-steps-'));
const live: ServeProcess[] = [];
let postgres: StartedPostgres | undefined;
let database: { connectionString: string; drop: () => Promise<void> } | undefined;
let scenarios = 0;

beforeAll(async () => {
  postgres = await startPostgres();
  database = await postgres.createDatabase();
}, 120_000);

// the instances of one scenario never outlive it: on the shared PostgreSQL database an earlier scenario's survivor,
// with another fake job directory, would take the next scenario's tasks over
afterEach(async () => {
  await Promise.all(live.splice(0).map((p) => p.kill()));
});

afterAll(async () => {
  await database?.drop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** One scenario's world: its store, the fake job API's directory, the item log. */
interface World {
  env: Record<string, string>;
  jobsDir: string;
  itemLog: string;
  /** The instance a task is created on, and the one that finishes it after the first is killed. */
  first: (env?: Record<string, string>) => Promise<ServeProcess>;
  after: () => Promise<ServeProcess>;
  openStore: () => Promise<TaskStore>;
}

async function serve(store: string, env: Record<string, string>): Promise<ServeProcess> {
  const p = await startServe(['--store', store, '--lease-ms', String(LEASE_MS)], 30_000, env);
  live.push(p);
  return p;
}

function world(kind: 'sqlite' | 'postgres'): World {
  const base = join(dir, `scenario-${++scenarios}`);
  mkdirSync(base);
  const env = { CLOSEOUT_FAKE_JOB_DIR: join(base, 'jobs'), CLOSEOUT_ITEM_LOG: join(base, 'items.jsonl') };
  const common = { env, jobsDir: env.CLOSEOUT_FAKE_JOB_DIR, itemLog: env.CLOSEOUT_ITEM_LOG };
  if (kind === 'sqlite') {
    const file = join(base, 'server.db');
    return {
      ...common,
      first: (extra = {}) => serve(file, { ...env, ...extra }),
      // the same file, after a restart
      after: () => serve(file, env),
      openStore: async () => new SqliteTaskStore(file),
    };
  }
  const url = database!.connectionString;
  let survivor: Promise<ServeProcess> | undefined;
  return {
    ...common,
    // the survivor runs from the start, next to the instance that will be killed
    first: async (extra = {}) => {
      survivor = serve(url, env);
      const [first] = await Promise.all([serve(url, { ...env, ...extra }), survivor]);
      return first;
    },
    after: () => survivor!,
    openStore: () => PostgresTaskStore.open(url, { listen: false }),
  };
}

async function create(url: string, name: string, args: Record<string, unknown>): Promise<string> {
  const r = await rpc(url, 'tools/call', { name, arguments: args });
  expect(r.result?.['resultType']).toBe('task');
  return r.result!['taskId'] as string;
}

async function settled(url: string, taskId: string): Promise<Record<string, unknown>> {
  return waitFor(
    `task ${taskId} to close out`,
    async () => {
      const r = await rpc(url, 'tasks/get', { taskId });
      return ['completed', 'failed', 'cancelled'].includes(String(r.result?.['status'])) ? r.result! : undefined;
    },
    45_000,
    50,
  );
}

async function statusMessage(url: string, taskId: string, pattern: RegExp): Promise<string> {
  return waitFor(
    `task ${taskId} to say ${pattern}`,
    async () => {
      const message = String((await rpc(url, 'tasks/get', { taskId })).result?.['statusMessage'] ?? '');
      return pattern.test(message) ? message : undefined;
    },
    30_000,
    10,
  );
}

function lines<T>(file: string): T[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as T);
}

/** What the fake job API saw for a task: start calls, and the jobs that exist. */
function externalJobs(w: World, taskId: string): { startCalls: number; jobIds: string[] } {
  const key = `closeout:${taskId}:start`;
  const startCalls = lines<{ idempotencyKey: string }>(join(w.jobsDir, 'calls.jsonl')).filter(
    (call) => call.idempotencyKey === key,
  ).length;
  const jobIds = readdirSync(join(w.jobsDir, 'jobs'))
    .filter((name) => name.endsWith('.json'))
    .map(
      (name) =>
        JSON.parse(readFileSync(join(w.jobsDir, 'jobs', name), 'utf8')) as { jobId: string; idempotencyKey: string },
    )
    .filter((job) => job.idempotencyKey === key)
    .map((job) => job.jobId);
  return { startCalls, jobIds };
}

async function stepsOf(w: World, taskId: string) {
  const store = await w.openStore();
  try {
    return await store.readSteps(taskId);
  } finally {
    await store.close();
  }
}

const RENDER = { scene: 'intro', frames: 120, renderMs: 2500 };

// a kill, a takeover and two tasks to their end: minutes on a loaded machine, where the default 30 s cut the test short
// while its own waits (45 s for a close-out) were still within bounds
describe.each(['sqlite', 'postgres'] as const)('durable steps under SIGKILL (%s)', { timeout: 180_000 }, (kind) => {
  it('render_job killed before its start step committed follows the same external job, started once', async () => {
    const w = world(kind);
    const hold = join(dir, `hold-${scenarios}`);
    const first = await w.first({ CLOSEOUT_DEMO_HOLD_AT: 'job-started', CLOSEOUT_DEMO_HOLD_FILE: hold });
    const taskId = await create(first.url, 'render_job', RENDER);
    const heldJobId = await waitFor('the external job to start', () =>
      existsSync(hold) ? readFileSync(hold, 'utf8') || undefined : undefined,
    );
    // the job was started, the step's result is not committed
    expect(await stepsOf(w, taskId)).toEqual({ steps: [], checkpoint: undefined });
    await first.kill();

    const next = await w.after();
    const task = await settled(next.url, taskId);
    const baseline = await settled(next.url, await create(next.url, 'render_job', RENDER));
    expect(task).toMatchObject({
      status: 'completed',
      result: { structuredContent: { jobId: heldJobId, attempt: 2 } },
    });
    expect((task['result'] as { content: unknown }).content).toEqual(
      (baseline['result'] as { content: unknown }).content,
    );
    // the step's function ran in both attempts (the first never committed); the API's key kept it to one job
    expect(externalJobs(w, taskId)).toEqual({ startCalls: 2, jobIds: [heldJobId] });
    expect((await stepsOf(w, taskId)).steps).toEqual([
      { name: 'start', result: { jobId: heldJobId }, committedAt: expect.any(Number) },
    ]);
  });

  it('render_job killed after its start step committed never starts the job again', async () => {
    const w = world(kind);
    const hold = join(dir, `hold-${scenarios}`);
    const first = await w.first({ CLOSEOUT_DEMO_HOLD_AT: 'start-committed', CLOSEOUT_DEMO_HOLD_FILE: hold });
    const taskId = await create(first.url, 'render_job', RENDER);
    const jobId = await waitFor('the start step to commit', () =>
      existsSync(hold) ? readFileSync(hold, 'utf8') || undefined : undefined,
    );
    expect((await stepsOf(w, taskId)).steps).toEqual([
      { name: 'start', result: { jobId }, committedAt: expect.any(Number) },
    ]);
    await first.kill();

    const next = await w.after();
    const task = await settled(next.url, taskId);
    const baseline = await settled(next.url, await create(next.url, 'render_job', RENDER));
    expect(task).toMatchObject({ status: 'completed', result: { structuredContent: { jobId, attempt: 2 } } });
    expect((task['result'] as { content: unknown }).content).toEqual(
      (baseline['result'] as { content: unknown }).content,
    );
    expect(externalJobs(w, taskId)).toEqual({ startCalls: 1, jobIds: [jobId] });
  });

  it('batch_job killed between two checkpoints goes on from the last item committed', async () => {
    const w = world(kind);
    const first = await w.first();
    // items enough that the kill comes long before the last, even on a loaded machine
    const args = { items: 30, stepMs: 150 };
    const taskId = await create(first.url, 'batch_job', args);
    await statusMessage(first.url, taskId, /^Processed 4 of 30 items$/);
    await first.kill();

    const next = await w.after();
    const task = await settled(next.url, taskId);
    const baseline = await settled(next.url, await create(next.url, 'batch_job', args));
    expect(task).toMatchObject({ status: 'completed', result: { structuredContent: { processed: 30, attempt: 2 } } });
    expect((task['result'] as { content: unknown }).content).toEqual(
      (baseline['result'] as { content: unknown }).content,
    );
    const items = lines<{ taskId: string; item: number; attempt: number }>(w.itemLog).filter(
      (entry) => entry.taskId === taskId,
    );
    const before = items.filter((entry) => entry.attempt === 1).map((entry) => entry.item);
    const after = items.filter((entry) => entry.attempt === 2).map((entry) => entry.item);
    const last = before.at(-1)!;
    expect(before).toEqual(Array.from({ length: last }, (_, i) => i + 1));
    expect(last).toBeGreaterThanOrEqual(4);
    // the second attempt starts right after the last item committed: the item in flight at the kill (logged, its
    // checkpoint not committed) at most is processed again
    expect([last, last + 1]).toContain(after[0]);
    expect(after).toEqual(Array.from({ length: 30 - after[0]! + 1 }, (_, i) => after[0]! + i));
    expect((await stepsOf(w, taskId)).checkpoint).toBe(30);
  });
});
