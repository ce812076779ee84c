// The CLI's way out of unknown-outcome (RELIABILITY.md, "What arrived is kept"): a call whose answer was lost (the
// client SIGKILLed right after the server answered tools/call) is recovered by `closeout resubmit` or by the same
// `closeout call` with the same --idempotency-key and arguments: both get the task the lost call created, and the tool
// runs once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/index.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { jsonLines, runCli } from '../support/cli.js';
import { startClientWorker } from '../support/clientWorker.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const ARGS = { items: 2, stepMs: 100 };
const KEY = 'nightly-2026-11-30';

let dir: string;
let server: ServeProcess;
let ledgerPath: string;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-cli-resubmit-'));
  ledgerPath = join(dir, 'ledger.db');
  server = await startServe(['--store', join(dir, 'server.db')]);
});

afterEach(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

function serverTasks(): Array<{ task_id: string; status: string; attempt: number }> {
  const db = openDatabase(join(dir, 'server.db'), { readonly: true });
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

/** `closeout call` as a library process that dies just after the server answered: the task exists, unrecorded. */
async function loseAnswer(): Promise<string> {
  const worker = startClientWorker({
    mode: 'call',
    url: server.url,
    ledger: ledgerPath,
    askedLog: join(dir, 'asked.log'),
    tool: 'batch_job',
    args: ARGS,
    idempotencyKey: KEY,
    killAt: { method: 'tools/call', when: 'after' },
  });
  expect((await worker.exited).signal).toBe('SIGKILL');
  const created = serverTasks();
  expect(created).toHaveLength(1);
  const ledger = new SqliteLedger(ledgerPath);
  try {
    const [record] = await ledger.list();
    expect(record).toMatchObject({ localState: 'submitting', taskId: undefined });
    // its lease runs out (the worker's is 1 s)
    await waitFor('the lease to run out', () => (Date.now() > record!.leaseExpiresAt! + 100 ? true : undefined));
  } finally {
    await ledger.dispose();
  }
  return created[0]!.task_id;
}

const closeOutOf = (stdout: string) => jsonLines(stdout).find((line) => line['event'] === 'closeout');

describe('after a lost tools/call answer', () => {
  it('`closeout resume` names `closeout resubmit`, which gets the task the lost call created', async () => {
    const taskId = await loseAnswer();
    const resume = await runCli(['resume'], { ledger: ledgerPath });
    expect(resume.code).toBe(4);
    expect(resume.stdout).toMatch(/unknown-outcome.*closeout resubmit/);

    const resubmit = await runCli(['resubmit', KEY, '--json'], { ledger: ledgerPath });
    expect(resubmit.code, resubmit.stderr).toBe(0);
    expect(closeOutOf(resubmit.stdout)).toMatchObject({ taskId, outcome: 'completed' });
    expect(serverTasks()).toEqual([{ task_id: taskId, status: 'completed', attempt: 1 }]);
  });

  it('the same `closeout call` with the same key and arguments gets that task too', async () => {
    const taskId = await loseAnswer();
    const call = await runCli(
      ['call', server.url, 'batch_job', '--args', JSON.stringify(ARGS), '--idempotency-key', KEY, '--json'],
      { ledger: ledgerPath },
    );
    expect(call.code, call.stderr).toBe(0);
    expect(closeOutOf(call.stdout)).toMatchObject({ taskId, outcome: 'completed' });
    expect(serverTasks()).toEqual([{ task_id: taskId, status: 'completed', attempt: 1 }]);
  });
});
