// An answer that arrived is a fact (docs/DESIGN.md rule 10): a CreateTaskResult that reaches a client is recorded on
// its ledger record, whoever holds the record's lease by then and however long another process holds the ledger's write
// lock, so the task stays reachable and is never run a second time to find it again.
// - A client process stopped (SIGSTOP) with the answer to its tools/call on the way in, for longer than its lease,
//   while another process's resumeAll() settles the submission as unknown-outcome; woken (SIGCONT), it records the
//   taskId on the record and follows the task to its end.
// - `closeout call` receiving its answer while another process holds BEGIN IMMEDIATE on the ledger for longer than
//   the ledger's busy timeout: the taskId is on stderr at once, the commit is retried, the call closes out.
// - The same for an answer that ends the call without a task (an immediate result): the close-out is retried, the
//   result printed, and the same call again with its idempotency key answers from the ledger instead of running the
//   tool a second time (no server recognises the key of a call that made no task).
// And the converse: a submission is sent only by the process that holds its intent (docs/DESIGN.md, "The task's life
// on the client" 1). A client process stopped after its intent is committed and before its tools/call leaves, for
// longer than its lease, while another process's resumeAll() settles the intent as never sent and resubmits it, sends
// nothing when it runs again: sending then would run the tool twice.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/index.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import type { FixtureServer } from '../client/fixtures/tasksFixtureServer.js';
import { startTasksFixture } from '../client/fixtures/tasksFixtureServer.js';
import { startCli } from '../support/cli.js';
import { type ClientWorker, processState, startClientWorker } from '../support/clientWorker.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

/**
 * The other process is one that has been up for a while: a stopped holder is alive, so only a process that saw the
 * ledger healthy for a whole lease of its own may take its lease (docs/DESIGN.md rule 11; a fresh one would wait).
 */
const RUNNING_RESUMER = { leaseMs: 1_000, warmUpMs: 2_000 };

let dir: string;
const cleanups: Array<() => Promise<void> | void> = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-answer-arrived-'));
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  rmSync(dir, { recursive: true, force: true });
});

function worker(config: Record<string, unknown>): ClientWorker {
  const started = startClientWorker(config);
  cleanups.push(() => {
    started.child.kill('SIGKILL');
  });
  return started;
}

async function ledgerRecords(path: string) {
  const ledger = new SqliteLedger(path);
  try {
    return await Promise.all(
      (await ledger.list()).map(async (record) => ({ record, history: await ledger.history(record.recordId) })),
    );
  } finally {
    await ledger.dispose();
  }
}

function serverTasks(path: string): Array<{ task_id: string; status: string; attempt: number }> {
  const db = openDatabase(path, { readonly: true });
  try {
    return db.prepare(`SELECT task_id, status, attempt FROM tasks`).all() as Array<{
      task_id: string;
      status: string;
      attempt: number;
    }>;
  } finally {
    db.close();
  }
}

/**
 * A demo server, and a client process calling its batch_job (or what `call` says) that stops itself (SIGSTOP) where
 * `call.pauseAt` says, then stays stopped until its lease has run out. `submitted`: its ledger record as the stop left
 * it.
 */
async function stoppedPastLease(call: Record<string, unknown>, serverEnv: Record<string, string> = {}) {
  const server: ServeProcess = await startServe(['--store', join(dir, 'server.db')], 15_000, serverEnv);
  cleanups.push(() => server.stop());
  const config = { url: server.url, ledger: join(dir, 'ledger.db'), askedLog: join(dir, 'asked.log') };
  const paused = worker({
    ...config,
    mode: 'call',
    tool: 'batch_job',
    args: { items: 3, stepMs: 100 },
    leaseMs: 1_000,
    ...call,
  });
  await paused.next('paused');
  const pid = paused.child.pid!;
  await waitFor('the client process to be stopped', () => (processState(pid) === 'T' ? true : undefined));
  const [submitted] = await ledgerRecords(config.ledger);
  // the stopped process cannot renew its lease: wait until it has run out
  const leaseEnd = submitted!.record.leaseExpiresAt!;
  await waitFor('the lease to run out', () => (Date.now() > leaseEnd + 200 ? true : undefined), 10_000, 50);
  return { config, paused, submitted: submitted!.record };
}

/**
 * A tasks fixture server during whose first tools/call (once the call is on the server, before its answer leaves)
 * another connection takes the ledger's write lock (BEGIN IMMEDIATE) and holds it until `release`.
 */
async function lockedOnToolsCall(ledgerPath: string) {
  let holder: Database.Database | undefined;
  const release = () => {
    if (holder?.inTransaction) holder.exec('ROLLBACK');
    holder?.close();
  };
  const fixture: FixtureServer = await startTasksFixture({
    beforeAnswer: (request) => {
      if (request.method !== 'tools/call' || holder) return;
      holder = openDatabase(ledgerPath);
      holder.exec('BEGIN IMMEDIATE');
    },
  });
  cleanups.push(() => fixture.close());
  cleanups.push(release);
  return { fixture, lock: { held: () => holder?.inTransaction === true, release } };
}

// real processes, a pause past the lease and a held lock: well over the default 30 s on a loaded machine
describe('an answer that arrives is recorded', { timeout: 120_000 }, () => {
  it('after a SIGSTOP longer than the lease, while another process settled the submission unknown-outcome', async () => {
    const { config, paused, submitted } = await stoppedPastLease({
      idempotencyKey: 'lid-closed',
      pauseAt: { method: 'tools/call' },
    });
    expect(submitted).toMatchObject({ localState: 'submitting', taskId: undefined });

    const resumer = worker({ ...config, mode: 'resume', ...RUNNING_RESUMER });
    expect(await resumer.next('resumed')).toMatchObject({ taskIds: [], unknownOutcome: [{ key: 'lid-closed' }] });
    await resumer.next('done');
    expect((await ledgerRecords(config.ledger))[0]?.record.localState).toBe('unknown-outcome');
    const created = serverTasks(join(dir, 'server.db'));
    expect(created).toHaveLength(1);

    paused.child.kill('SIGCONT');
    const handle = await paused.next('handle');
    expect(handle['taskId']).toBe(created[0]?.task_id);
    expect(await paused.next('outcome')).toMatchObject({ kind: 'completed' });
    expect((await paused.exited).code).toBe(0);

    const [after] = await ledgerRecords(config.ledger);
    expect(after?.record).toMatchObject({ taskId: created[0]?.task_id, localState: 'terminal', status: 'completed' });
    expect(after?.history.map((entry) => entry.localState)).toEqual(
      expect.arrayContaining(['submitting', 'unknown-outcome', 'tracking', 'terminal']),
    );
    expect(serverTasks(join(dir, 'server.db'))).toEqual([
      { task_id: created[0]?.task_id, status: 'completed', attempt: 1 },
    ]);
  });

  it('an immediate result, after a SIGSTOP longer than the lease, while another process settled the submission', async () => {
    const runLog = join(dir, 'runs.log');
    const echo = { tool: 'echo', args: { text: 'order 42' }, idempotencyKey: 'order-42' };
    const { config, paused } = await stoppedPastLease(
      { ...echo, pauseAt: { method: 'tools/call' } },
      { CLOSEOUT_RUN_LOG: runLog },
    );
    const resumer = worker({ ...config, mode: 'resume', ...RUNNING_RESUMER });
    expect(await resumer.next('resumed')).toMatchObject({ unknownOutcome: [{ key: 'order-42' }] });
    await resumer.next('done');

    paused.child.kill('SIGCONT');
    const answer = { result: { content: [{ type: 'text', text: 'order 42' }] } };
    expect(await paused.next('result')).toMatchObject(answer);
    expect((await paused.exited).code).toBe(0);
    const [after] = await ledgerRecords(config.ledger);
    expect(after?.record).toMatchObject({ localState: 'terminal', terminalReason: 'immediate result' });
    expect(after?.history.at(-1)?.note).toMatch(/^immediate result; the tools\/call answer arrived after the record/);

    // the same call again, from another process: the recorded answer, not a second run
    const again = worker({ ...config, mode: 'call', ...echo });
    expect(await again.next('result')).toMatchObject(answer);
    const runs = readFileSync(runLog, 'utf8').trim().split('\n');
    expect(runs.filter((line) => line.includes('"echo"'))).toHaveLength(1);
  });

  it('while another process holds the ledger write lock past the busy timeout, and says the taskId meanwhile', async () => {
    const ledgerPath = join(dir, 'ledger.db');
    const { fixture, lock } = await lockedOnToolsCall(ledgerPath);
    const call = startCli(['call', fixture.url.href, 'slow', '--arg', 'n=1'], {
      ledger: ledgerPath,
      timeoutMs: 60_000,
    });
    cleanups.push(() => {
      call.child.kill('SIGKILL');
    });
    await waitFor('the lock to be held', () => (lock.held() ? true : undefined), 20_000);
    const taskId = await waitFor('the task to exist', () => [...fixture.tasks.keys()][0], 5_000);
    // the CLI's busy timeout is 3 s: hold the lock well past it
    const lockedAt = Date.now();
    await waitFor('the taskId on stderr', () => (call.stderr().includes(taskId) ? true : undefined), 10_000, 50);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, lockedAt + 4_500 - Date.now())));
    expect(call.child.exitCode).toBeNull();
    lock.release();

    const run = await call.done;
    expect(run.stderr).toContain(taskId);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/completed/);
    const [after] = await ledgerRecords(ledgerPath);
    expect(after?.record).toMatchObject({ taskId, localState: 'terminal', status: 'completed' });
    expect(fixture.runs.get('slow')).toBe(1);
  });

  it('an immediate result, while another process holds the ledger write lock past the busy timeout', async () => {
    const ledgerPath = join(dir, 'ledger.db');
    const { fixture, lock } = await lockedOnToolsCall(ledgerPath);
    const args = ['call', fixture.url.href, 'echo', '--arg', 'order=42', '--idempotency-key', 'order-42'];
    const call = startCli(args, { ledger: ledgerPath, timeoutMs: 60_000 });
    cleanups.push(() => {
      call.child.kill('SIGKILL');
    });
    await waitFor('the lock to be held', () => (lock.held() ? true : undefined), 20_000);
    // the CLI's busy timeout is 3 s: hold the lock well past it
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    expect(call.child.exitCode).toBeNull();
    lock.release();

    const run = await call.done;
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('order');
    const [after] = await ledgerRecords(ledgerPath);
    expect(after?.record).toMatchObject({ localState: 'terminal', terminalReason: 'immediate result' });
    expect(JSON.stringify(after?.record.result)).toContain('order');
    expect(fixture.runs.get('echo')).toBe(1);

    // the same call again: its recorded answer, not a second run
    const again = await startCli(args, { ledger: ledgerPath, timeoutMs: 30_000 }).done;
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('order');
    expect(fixture.runs.get('echo')).toBe(1);
  });
});

// real processes and a pause past the lease: well over the default 30 s on a loaded machine
describe('a submission whose intent another process settled while this one was stopped', { timeout: 120_000 }, () => {
  it('is not sent when the process runs again, so a resubmission is the only run', async () => {
    const { config, paused, submitted: intent } = await stoppedPastLease({ pauseAt: { ledger: 'markSent' } });
    expect(intent).toMatchObject({ localState: 'submitting', taskId: undefined, sentAt: undefined });

    // another process finds the intent never sent, and the person behind it sends the call again
    const resumer = worker({ ...config, mode: 'resume', resubmit: true, ...RUNNING_RESUMER });
    const resumed = await resumer.next('resumed');
    expect(resumed['unknownOutcome']).toEqual([
      expect.objectContaining({
        recordId: intent.recordId,
        reason: expect.stringMatching(/before tools\/call was sent/),
      }),
    ]);
    const resubmitted = await resumer.next('resubmitted');
    expect(await resumer.next('outcome')).toMatchObject({ taskId: resubmitted['taskId'], kind: 'completed' });
    expect((await resumer.exited).code).toBe(0);
    expect(serverTasks(join(dir, 'server.db'))).toEqual([
      { task_id: resubmitted['taskId'], status: 'completed', attempt: 1 },
    ]);

    paused.child.kill('SIGCONT');
    const refused = await paused.next('error');
    expect(refused).toMatchObject({
      code: 'invalid-state',
      message: expect.stringMatching(/tools\/call was not sent/),
    });
    await paused.next('done');
    expect(paused.events.filter((event) => event.event === 'sending')).toEqual([]);
    expect(serverTasks(join(dir, 'server.db'))).toEqual([
      { task_id: resubmitted['taskId'], status: 'completed', attempt: 1 },
    ]);

    const records = await ledgerRecords(config.ledger);
    const original = records.find((entry) => entry.record.recordId === intent.recordId);
    expect(original?.record).toMatchObject({ localState: 'unknown-outcome', taskId: undefined, sentAt: undefined });
    expect(original?.history.map((entry) => entry.localState)).toEqual(['submitting', 'unknown-outcome']);
  });
});
