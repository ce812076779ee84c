/**
 * `closeout serve`'s activity log: a line on stderr when a task is created and when it finishes (status, attempt,
 * time since creation); after a SIGKILL and a restart on the same store, a line saying the interrupted task was taken
 * over and re-run, then its finish in attempt 2, or, for a task that cannot be re-run, failed as interrupted; a task
 * its client cancelled while its instance was gone, cancelled by the instance that takes it over; every task past its
 * TTL logged as expired exactly once, whether a read or the sweep found it; finished tasks purged in bulk;
 * `--log-format json` gives one JSON object per event; `--quiet` none. No line carries an argument or a result (the
 * same under failure is test/e2e/serveLogs.test.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { fakeClock } from '../support/faketime.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { settled } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

let dir: string;
const servers: ServeProcess[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-serve-activity-'));
});

afterAll(async () => {
  for (const server of servers) await server.kill().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

async function serve(args: string[], env: Record<string, string> = {}): Promise<ServeProcess> {
  const server = await startServe(args, 15_000, env);
  servers.push(server);
  return server;
}

async function create(url: string, args: Record<string, unknown>, name = 'batch_job'): Promise<string> {
  const created = await rpc(url, 'tools/call', { name, arguments: args }, { capabilities: { elicitation: {} } });
  const taskId = created.result?.['taskId'];
  expect(typeof taskId, JSON.stringify(created)).toBe('string');
  return taskId as string;
}

/** Starts an export_report (not resumable) on `server`, and SIGKILLs the server while it runs. */
async function killedWhileRunning(server: ServeProcess): Promise<string> {
  const taskId = await create(server.url, { pages: 300, pageMs: 200 }, 'export_report');
  await waitFor('the task to run', () => server.stderr().includes(`task ${taskId} created`) || undefined, 10_000);
  await server.kill();
  return taskId;
}

/** The line `server` logs when it takes `taskId` over. */
async function takeOverLine(server: ServeProcess, taskId: string): Promise<string> {
  const prefix = `closeout serve: task ${taskId} taken over`;
  return waitFor(
    'the take-over line',
    () =>
      server
        .stderr()
        .split('\n')
        .find((line) => line.startsWith(prefix)),
    10_000,
  );
}

/** The count of each line `closeout serve: N [finished] task(s) <what>` in `log`, in order. */
function counted(log: string, what: RegExp): number[] {
  const line = new RegExp(`^closeout serve: (\\d+) (?:finished )?tasks? ${what.source}$`, 'gm');
  return [...log.matchAll(line)].map((match) => Number(match[1]));
}

const EXPIRED = /expired \(past their TTL\)/;
const PURGED = /purged \(retention over\)/;

/** Argument values no log line may show (they may be secret). */
const SECRET_ENV = 'prod-eu-7c1d9e';

describe('closeout serve activity log', { timeout: 90_000 }, () => {
  it('logs creation and finish, and a take-over with its re-run after a restart', async () => {
    const store = join(dir, 'server.db');
    const first = await serve(['--store', store, '--lease-ms', '1000']);
    const quick = await create(first.url, { items: 2, stepMs: 100 });
    await settled(first.url, quick, 30_000);
    await waitFor('the finish line', () => first.stderr().includes(`task ${quick} completed`) || undefined, 10_000);
    expect(first.stderr()).toContain(`closeout serve: task ${quick} created (batch_job)`);
    expect(first.stderr()).toMatch(
      new RegExp(`closeout serve: task ${quick} completed \\(batch_job, attempt 1, \\d+(ms|\\.\\ds) after creation\\)`),
    );

    await waitFor(
      'the start line',
      () => first.stderr().includes('closeout serve: no open task in the store') || undefined,
      10_000,
    );
    const long = await create(first.url, { items: 12, stepMs: 250 });
    await first.kill();
    const second = await serve(['--store', store, '--lease-ms', '1000']);
    await waitFor(
      'the start line',
      () => second.stderr().includes('closeout serve: 1 open task in the store') || undefined,
      10_000,
    );
    await settled(second.url, long, 60_000);
    await waitFor('the finish line', () => second.stderr().includes(`task ${long} completed`) || undefined, 10_000);
    expect(second.stderr()).toContain(`closeout serve: task ${long} taken over (batch_job): re-run here (resumable)`);
    expect(second.stderr()).toMatch(new RegExp(`task ${long} completed \\(batch_job, attempt 2, `));
  });

  it('says at shutdown how many running tasks it handed back', async () => {
    const server = await serve(['--store', join(dir, 'stop.db')]);
    await create(server.url, { items: 40, stepMs: 250 });
    await waitFor('the task to run', () => server.stderr().includes('created (batch_job)') || undefined, 10_000);
    await server.stop();
    expect(server.stderr()).toContain(
      'closeout serve: stopped, 1 running task handed back to the store for the next instance',
    );
  });

  it('fails a task that cannot be re-run as interrupted after a SIGKILL and a restart, and says so', async () => {
    const store = join(dir, 'interrupted.db');
    const first = await serve(['--store', store, '--lease-ms', '1000']);
    const report = await killedWhileRunning(first);
    const second = await serve(['--store', store, '--lease-ms', '1000']);
    expect(await settled(second.url, report, 30_000)).toMatchObject({ status: 'failed' });
    expect(await takeOverLine(second, report)).toBe(
      `closeout serve: task ${report} taken over (export_report): failed as interrupted (not resumable)`,
    );
    // failed by the take-over, not by a run of its own: no finish line, and no re-run
    expect(second.stderr()).not.toMatch(new RegExp(`task ${report} (failed|completed) \\(`));
  });

  it('cancels a task its client cancelled while its instance was gone, on taking it over from that instance', async () => {
    const store = join(dir, 'cancelled.db');
    // the first instance's lease outlives it by up to 4 s: time for the cancel to land before the take-over
    const first = await serve(['--store', store, '--lease-ms', '4000']);
    const second = await serve(['--store', store, '--lease-ms', '1000']);
    const report = await killedWhileRunning(first);
    expect((await rpc(second.url, 'tasks/cancel', { taskId: report })).error).toBeUndefined();
    expect(await settled(second.url, report, 30_000)).toMatchObject({ status: 'cancelled' });
    expect(await takeOverLine(second, report)).toBe(
      `closeout serve: task ${report} taken over (export_report): cancelled, as its client asked`,
    );
  });

  it('logs every task past its TTL as expired once, found by a read or by the sweep, then the purge in bulk', async () => {
    // the server's wall clock steps forward (libfaketime, as test/e2e/serveRetention.test.ts); its timers keep real
    // time, so the sweep runs every 5 s (a third of the lease) whatever the clock says
    const clock = fakeClock('+0');
    const server = await serve(['--store', join(dir, 'expiry.db'), '--lease-ms', '15000'], clock.env);
    const url = server.url;
    await waitFor('the start line', () => server.stderr().includes('no open task in the store') || undefined, 10_000);
    // the demo tools' TTL is an hour: `read` and `done` are created at 0, `swept` half an hour later
    const read = await create(url, { env: SECRET_ENV }, 'approve_deploy');
    const done = await create(url, { items: 1, stepMs: 0 });
    await settled(url, done, 30_000);
    clock.set('+1800');
    const swept = await create(url, { env: SECRET_ENV }, 'approve_deploy');

    // past `read`'s TTL, not `swept`'s: a tasks/get finds it overdue and expires it before the sweep comes round
    clock.set('+3610');
    expect((await rpc(url, 'tasks/get', { taskId: read })).result).toMatchObject({ status: 'failed' });
    await waitFor('the expiry found by the read', () => counted(server.stderr(), EXPIRED).length > 0 || undefined);
    expect(counted(server.stderr(), EXPIRED)).toEqual([1]);

    // past `swept`'s TTL, and nobody reads it: the sweep expires it
    clock.set('+5410');
    await waitFor('the expiry found by the sweep', () => counted(server.stderr(), EXPIRED).length > 1 || undefined);
    expect((await rpc(url, 'tasks/get', { taskId: swept })).result).toMatchObject({ status: 'failed' });

    // past every task's createdAt + ttlMs + retention (an hour): all three go in one sweep, one line
    clock.set('+9100');
    await waitFor('the purge', () => counted(server.stderr(), PURGED).length > 0 || undefined, 15_000);
    const log = server.stderr();
    expect(counted(log, EXPIRED)).toEqual([1, 1]);
    expect(counted(log, PURGED)).toEqual([3]);
    expect(log).toContain('closeout serve: 3 finished tasks purged (retention over)');
    for (const taskId of [read, swept, done]) {
      expect((await rpc(url, 'tasks/get', { taskId })).error?.message).toMatch(/expired/);
    }
    // never an argument value or a result in the log
    expect(log).not.toContain(SECRET_ENV);
    expect(log).not.toContain('Processed 1 items');
  });

  it('logs one JSON object per event with --log-format json, and nothing with --quiet', async () => {
    const json = await serve(['--store', join(dir, 'json.db'), '--log-format', 'json']);
    const taskId = await create(json.url, { items: 1, stepMs: 50 });
    await settled(json.url, taskId, 30_000);
    const events = await waitFor(
      'the finish event',
      () => {
        const parsed = json
          .stderr()
          .split('\n')
          .filter((line) => line.startsWith('{'))
          .map((line) => JSON.parse(line) as Record<string, unknown>);
        return parsed.some((event) => event['event'] === 'task.finished') ? parsed : undefined;
      },
      10_000,
    );
    expect(events.find((event) => event['event'] === 'serve.started')).toMatchObject({ openTasks: 0 });
    expect(events.find((event) => event['event'] === 'task.created')).toMatchObject({ taskId, tool: 'batch_job' });
    expect(events.find((event) => event['event'] === 'task.finished')).toMatchObject({
      taskId,
      status: 'completed',
      attempt: 1,
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });

    const quiet = await serve(['--store', join(dir, 'quiet.db'), '--quiet']);
    const silent = await create(quiet.url, { items: 1, stepMs: 50 });
    await settled(quiet.url, silent, 30_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(quiet.stderr()).not.toContain(silent);
  });
});
