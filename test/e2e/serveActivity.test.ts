/**
 * `closeout serve`'s activity log: a line on stderr when a task is created and when it finishes (status, attempt,
 * time since creation); after a SIGKILL and a restart on the same store, a line saying the interrupted task was taken
 * over and re-run, then its finish in attempt 2; `--log-format json` gives one JSON object per event; `--quiet` none.
 * (That no log line carries an argument or a result is test/e2e/serveLogs.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

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

async function serve(args: string[]): Promise<ServeProcess> {
  const server = await startServe(args);
  servers.push(server);
  return server;
}

async function create(url: string, args: Record<string, unknown>): Promise<string> {
  const created = await rpc(url, 'tools/call', { name: 'batch_job', arguments: args });
  const taskId = created.result?.['taskId'];
  expect(typeof taskId, JSON.stringify(created)).toBe('string');
  return taskId as string;
}

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
