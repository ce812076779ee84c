// Invariant (docs/DESIGN.md rule 2): nothing is ordered or expired by comparing two hosts' wall clocks. A `closeout
// serve` and a `closeout call` whose clocks disagree by more than the task's TTL, or a server whose clock steps back
// while a task runs (an NTP correction, a VM snapshot restored), still close the task out with the result the server
// holds: a terminal answer wins whatever its timestamps, and the client expires a handle only on the server's word or
// on its own monotonic clock. Real processes, clocks moved with libfaketime.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { jsonDocument, jsonLines, runCli, startCli } from '../support/cli.js';
import { fakeClock } from '../support/faketime.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-clock-'));
let files = 0;
const file = (name: string) => join(dir, `${++files}-${name}`);
const servers: ServeProcess[] = [];

afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
  rmSync(dir, { recursive: true, force: true });
});

async function serve(env: Record<string, string> = {}): Promise<ServeProcess> {
  const server = await startServe(['--store', file('server.db')], 60_000, env);
  servers.push(server);
  return server;
}

/** `closeout call URL batch_job --json`, followed to its close-out. */
function callBatch(url: string, env: Record<string, string> = {}, items = 6, ledger = file('ledger.db')) {
  return startCli(['call', url, 'batch_job', '--args', JSON.stringify({ items, stepMs: 500 }), '--json'], {
    ledger,
    env,
    timeoutMs: 120_000,
  });
}

/** Waits until the CLI printed a progress status of the first few items (the task is young, far from its end). */
async function early(call: ReturnType<typeof callBatch>): Promise<void> {
  await waitFor(
    'an early progress status',
    () => jsonLines(call.stdout()).find((e) => /Processed [1-4] of 12/.test(String(e['statusMessage']))),
    90_000,
  );
}

/** The client's own time of each status event it printed after the step (the step is proven to have happened). */
function statusTimes(stdout: string): number[] {
  return jsonLines(stdout)
    .filter((e) => e['event'] === 'status')
    .map((e) => Date.parse(String(e['at'])));
}

const HOUR = 3_600_000;

function closeOutOf(stdout: string): Record<string, unknown> | undefined {
  return jsonLines(stdout).find((event) => event['event'] === 'closeout');
}

describe.concurrent('clocks that disagree', { timeout: 180_000 }, () => {
  it('closes a task out when the client clock is two hours ahead of the server (TTL one hour)', async () => {
    const server = await serve();
    const run = await callBatch(server.url, fakeClock('+2h').env).done;
    expect(closeOutOf(run.stdout), run.stdout + run.stderr).toMatchObject({ outcome: 'completed', exitCode: 0 });
  });

  it('closes a task out when the server clock is two hours behind the client (TTL one hour)', async () => {
    const server = await serve(fakeClock('-2h').env);
    const run = await callBatch(server.url).done;
    expect(closeOutOf(run.stdout), run.stdout + run.stderr).toMatchObject({ outcome: 'completed', exitCode: 0 });
  });

  it('takes the terminal answer of a server whose clock stepped back an hour while the task ran', async () => {
    const clock = fakeClock('+0');
    const server = await serve(clock.env);
    const ledger = file('ledger.db');
    const call = callBatch(server.url, {}, 12, ledger);
    // the client has recorded a status with the server's first timestamps: now the server's clock goes back
    await early(call);
    clock.set('-1h');
    const run = await call.done;
    expect(closeOutOf(run.stdout), run.stdout + run.stderr).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(run.stdout).not.toMatch(/backwards/);
    // the ledger saw the server's timestamps go back (the fault happened while the client followed the task)
    const shown = jsonDocument(
      (await runCli(['show', String(closeOutOf(run.stdout)?.['taskId']), '--json'], { ledger })).stdout,
    );
    const stamps = (shown['history'] as { serverUpdatedAt?: string }[])
      .map((entry) => entry.serverUpdatedAt)
      .filter((at): at is string => at !== undefined)
      .map((at) => Date.parse(at));
    expect(
      stamps.some((at, i) => i > 0 && at < stamps[i - 1]! - HOUR / 2),
      JSON.stringify(shown['history']),
    ).toBe(true);
  });

  it('keeps following when the client clock steps forward past the TTL while it follows', async () => {
    const clock = fakeClock('+0');
    const server = await serve();
    const call = callBatch(server.url, clock.env, 12);
    await early(call);
    clock.set('+3h');
    const run = await call.done;
    expect(closeOutOf(run.stdout), run.stdout + run.stderr).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(
      statusTimes(run.stdout).some((at) => at > Date.now() + 2 * HOUR),
      run.stdout,
    ).toBe(true);
  });

  it('keeps polling when the client clock steps back while it follows', async () => {
    const clock = fakeClock('+0');
    const server = await serve();
    const call = callBatch(server.url, clock.env, 12);
    await early(call);
    clock.set('-3h');
    const run = await call.done;
    expect(closeOutOf(run.stdout), run.stdout + run.stderr).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(
      statusTimes(run.stdout).some((at) => at < Date.now() - 2 * HOUR),
      run.stdout,
    ).toBe(true);
  });
});
