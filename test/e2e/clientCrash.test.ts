// A client process SIGKILLed at the worst moments, against a real `closeout serve` over HTTP: while its task is
// working, while an input answer is on its way (before it leaves and after the server took it), and between sending
// tools/call and receiving the handle. After a restart on the same ledger each task ends correctly, no tool ran
// twice (one task row per call in the server's store, first attempt), and no input handler was asked twice.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/index.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { type ClientWorker, startClientWorker } from '../support/clientWorker.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const BUILT_CLIENT = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));

let dir: string;
let server: ServeProcess;
let config: { url: string; ledger: string; askedLog: string };
const workers: ClientWorker[] = [];

beforeAll(() => {
  if (!existsSync(BUILT_CLIENT)) throw new Error('dist/client is missing: run `npm run build` (npm test does it)');
});

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-client-crash-'));
  server = await startServe(['--store', join(dir, 'server.db'), '--lease-ms', '2000']);
  config = { url: server.url, ledger: join(dir, 'ledger.db'), askedLog: join(dir, 'asked.log') };
});

afterEach(async () => {
  for (const worker of workers.splice(0)) worker.child.kill('SIGKILL');
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

function startWorker(options: Record<string, unknown>): ClientWorker {
  const worker = startClientWorker({ ...config, ...options });
  workers.push(worker);
  return worker;
}

/** The server's own record of what ran: one row per task it created, with how many times a handler started. */
function serverTasks(): Array<{ task_id: string; tool_name: string; status: string; attempt: number }> {
  const db = openDatabase(join(dir, 'server.db'), { readonly: true });
  try {
    return db.prepare(`SELECT task_id, tool_name, status, attempt FROM tasks`).all() as Array<{
      task_id: string;
      tool_name: string;
      status: string;
      attempt: number;
    }>;
  } finally {
    db.close();
  }
}

function askedLines(): string[] {
  return existsSync(config.askedLog) ? readFileSync(config.askedLog, 'utf8').trim().split('\n') : [];
}

async function ledgerRecords() {
  const ledger = new SqliteLedger(config.ledger);
  try {
    return await ledger.list();
  } finally {
    await ledger.dispose();
  }
}

const textOf = (result: unknown) => (result as { content: Array<{ text: string }> }).content[0]?.text;

describe('a client process SIGKILLed and restarted on the same ledger', () => {
  it('picks up a task that was working and closes it out without running it again', async () => {
    const first = startWorker({ mode: 'call', tool: 'batch_job', args: { items: 8, stepMs: 250 } });
    const { taskId } = await first.next('handle');
    await new Promise((resolve) => setTimeout(resolve, 600));
    first.child.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    expect((await ledgerRecords())[0]).toMatchObject({ taskId, localState: 'tracking', status: 'working' });

    const second = startWorker({ mode: 'resume' });
    expect(await second.next('resumed')).toMatchObject({ taskIds: [taskId], unknownOutcome: [] });
    const outcome = await second.next('outcome');
    expect(outcome).toMatchObject({ taskId, kind: 'completed' });
    expect((outcome['result'] as { structuredContent: unknown }).structuredContent).toEqual({
      processed: 8,
      attempt: 1,
    });
    expect(serverTasks()).toEqual([{ task_id: taskId, tool_name: 'batch_job', status: 'completed', attempt: 1 }]);
    const history = (await ledgerRecords())[0];
    expect(history).toMatchObject({ localState: 'terminal', status: 'completed' });
  });

  it.each(['before', 'after'] as const)(
    'never asks a person twice when killed while the input answer is being sent (%s it reaches the server)',
    async (when) => {
      const first = startWorker({
        mode: 'call',
        tool: 'approve_deploy',
        args: { env: 'prod', deployMs: 200 },
        killAt: { method: 'tasks/update', when },
      });
      const { taskId } = await first.next('handle');
      expect((await first.exited).signal).toBe('SIGKILL');
      expect(askedLines()).toEqual([`${taskId} approval`]);
      const [record] = await ledgerRecords();
      expect(record?.inputs).toEqual([
        expect.objectContaining({ key: 'approval', response: expect.any(Object), sentAt: undefined }),
      ]);

      const second = startWorker({ mode: 'resume' });
      expect(await second.next('resumed')).toMatchObject({ taskIds: [taskId] });
      const outcome = await second.next('outcome');
      expect(outcome).toMatchObject({ taskId, kind: 'completed' });
      // the answer the first process stored is the one the server used
      expect(textOf(outcome['result'])).toBe(`Deployed to prod (answered by ${first.child.pid})`);
      expect(askedLines()).toEqual([`${taskId} approval`]);
      expect(second.events.filter((event) => event.event === 'asked')).toEqual([]);
      expect(serverTasks()).toEqual([
        { task_id: taskId, tool_name: 'approve_deploy', status: 'completed', attempt: 1 },
      ]);
    },
  );

  it('surfaces a call killed before its answer as unknown-outcome, and an explicit resubmit gets the same task', async () => {
    const first = startWorker({
      mode: 'call',
      tool: 'batch_job',
      args: { items: 3, stepMs: 200 },
      idempotencyKey: 'nightly-2026-07-28',
      killAt: { method: 'tools/call', when: 'after' },
      // a lease far longer than the test: the restart must see that its holder is dead, not wait it out
      leaseMs: 600_000,
    });
    expect((await first.exited).signal).toBe('SIGKILL');
    expect(first.events.find((event) => event.event === 'handle')).toBeUndefined();
    const created = serverTasks();
    expect(created).toHaveLength(1);
    expect((await ledgerRecords())[0]).toMatchObject({ localState: 'submitting', taskId: undefined });

    const second = startWorker({ mode: 'resume' });
    const resumed = await second.next('resumed');
    expect(resumed).toMatchObject({ taskIds: [], unknownOutcome: [{ key: 'nightly-2026-07-28' }] });
    await second.next('done');
    expect(serverTasks()).toHaveLength(1); // surfaced, not re-sent
    expect((await ledgerRecords())[0]).toMatchObject({
      localState: 'unknown-outcome',
      terminalReason: expect.stringMatching(/tools\/call was sent and no answer was recorded/),
    });

    const third = startWorker({ mode: 'resubmit', ref: 'nightly-2026-07-28' });
    const resubmitted = await third.next('resubmitted');
    // the Closeout server hands back the task the lost call created, instead of running the job again
    expect(resubmitted['taskId']).toBe(created[0]?.task_id);
    expect(await third.next('outcome')).toMatchObject({ kind: 'completed' });
    expect(serverTasks()).toEqual([
      { task_id: created[0]?.task_id, tool_name: 'batch_job', status: 'completed', attempt: 1 },
    ]);
  });
});
