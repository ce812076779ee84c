// A side effect is fenced before it starts, not only when it commits (docs/DESIGN.md, "Rules learned in the field",
// 12), with real processes on one store:
// - an attempt stopped (SIGSTOP) past its lease, whose task another instance took over and carried through a step,
//   does not run that step's function again when it is continued: it learns it lost the lease first (PostgreSQL);
// - a step whose function finishes inside a graceful shutdown's grace, its lease still held, is committed: the next
//   instance goes on from it and never runs the function again (PostgreSQL and SQLite).
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const SERVER = fileURLToPath(new URL('./fixtures/stepServer.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'closeout-step-fence-'));
const live: ChildProcess[] = [];
let postgres: StartedPostgres;
let logs = 0;

beforeAll(async () => {
  postgres = await startPostgres();
}, 120_000);

afterEach(() => {
  for (const child of live.splice(0)) {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }
});

afterAll(async () => {
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

interface Instance {
  url: string;
  child: ChildProcess;
}

async function instance(store: string, stepLog: string, leaseMs: number): Promise<Instance> {
  const child = spawn(process.execPath, [SERVER, store, String(leaseMs)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, STEP_LOG: stepLog },
  });
  live.push(child);
  let err = '';
  child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]!.trim());
    });
    child.once('exit', (code) => reject(new Error(`step server exited with ${code}: ${err}`)));
  });
  return { url, child };
}

interface StepEntry {
  taskId: string;
  step: string;
  attempt: number;
  pid: number;
  phase: 'start' | 'end';
}

function entries(stepLog: string, taskId: string): StepEntry[] {
  if (!existsSync(stepLog)) return [];
  return readFileSync(stepLog, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as StepEntry)
    .filter((entry) => entry.taskId === taskId);
}

const startsOf = (stepLog: string, taskId: string, step: string) =>
  entries(stepLog, taskId).filter((entry) => entry.step === step && entry.phase === 'start');

async function completed(url: string, taskId: string): Promise<Record<string, unknown>> {
  return waitFor(
    `task ${taskId} to complete`,
    async () => {
      const r = await rpc(url, 'tasks/get', { taskId });
      const status = String(r.result?.['status']);
      return ['completed', 'failed', 'cancelled'].includes(status) ? r.result! : undefined;
    },
    40_000,
    100,
  );
}

async function create(url: string, args: Record<string, unknown>): Promise<string> {
  const r = await rpc(url, 'tools/call', { name: 'two_steps', arguments: args });
  expect(r.result?.['resultType']).toBe('task');
  return r.result!['taskId'] as string;
}

describe('durable steps fenced before they run', { timeout: 120_000 }, () => {
  it('an attempt continued after another took its task over does not run the step that one committed', async () => {
    const { connectionString } = await postgres.createDatabase();
    const stepLog = join(dir, `steps-${++logs}.jsonl`);
    const a = await instance(connectionString, stepLog, 1000);
    const b = await instance(connectionString, stepLog, 1000);
    const taskId = await create(a.url, { pauseMs: 1500, stepMs: 0 });
    await waitFor('A to run s1', () =>
      entries(stepLog, taskId).some((e) => e.step === 's1' && e.phase === 'end') ? true : undefined,
    );
    // s1's commit lands (a process stopped inside a transaction would hold the task's row lock)
    await sleep(300);
    // A stops in the pause between s1 and s2, past its lease: B takes the task over and carries it through s2
    a.child.kill('SIGSTOP');
    await waitFor(
      'B to run s2',
      () => (entries(stepLog, taskId).some((e) => e.step === 's2' && e.phase === 'end') ? true : undefined),
      30_000,
    );
    const task = await completed(b.url, taskId);
    expect(task).toMatchObject({ status: 'completed', result: { structuredContent: { attempt: 2 } } });
    a.child.kill('SIGCONT');
    // A's pause ran out while it was stopped: given time, the old attempt would run s2 now
    await sleep(3000);
    expect(startsOf(stepLog, taskId, 's1')).toEqual([expect.objectContaining({ pid: a.child.pid, attempt: 1 })]);
    expect(startsOf(stepLog, taskId, 's2')).toEqual([expect.objectContaining({ pid: b.child.pid, attempt: 2 })]);
  });

  // the field saw the finished step dropped on both stores: one database each
  const stores: Array<[string, () => Promise<string>]> = [
    ['PostgreSQL', async () => (await postgres.createDatabase()).connectionString],
    ['SQLite', async () => join(dir, `store-${++logs}.db`)],
  ];

  it.each(stores)(
    'a step that finished inside a graceful shutdown is committed and not run again (%s)',
    async (_, store) => {
      const location = await store();
      const stepLog = join(dir, `steps-${++logs}.jsonl`);
      const a = await instance(location, stepLog, 2000);
      const taskId = await create(a.url, { pauseMs: 0, stepMs: 1500 });
      await waitFor('A to start s1', () => (startsOf(stepLog, taskId, 's1').length > 0 ? true : undefined));
      const exited = once(a.child, 'exit');
      a.child.kill('SIGTERM');
      await exited;
      // the function ended during the shutdown's grace (5 s)
      expect(
        entries(stepLog, taskId)
          .filter((e) => e.step === 's1')
          .map((e) => e.phase),
      ).toEqual(['start', 'end']);

      const b = await instance(location, stepLog, 2000);
      const task = await completed(b.url, taskId);
      expect(task).toMatchObject({ status: 'completed', result: { structuredContent: { attempt: 2 } } });
      expect(startsOf(stepLog, taskId, 's1')).toHaveLength(1);
      expect(startsOf(stepLog, taskId, 's2')).toEqual([expect.objectContaining({ pid: b.child.pid, attempt: 2 })]);
    },
  );
});
