// A database blip is not a death (docs/DESIGN.md, "Rules learned in the field", 3). PostgreSQL stopped for
// several seconds while one `closeout serve` ran tasks: the running non-resumable tasks used to end "interrupted by a
// server restart" (no restart happened) and resumable ones ran a second attempt in the same live instance. A lease
// that could not be renewed only because the database was unreachable is still this instance's: its handler keeps
// running, its status and terminal writes wait for the database, and it completes on its first attempt. That holds
// for an outage shorter than the time a holder keeps its runs without a renewal (rule 13: a fifth of a lease short
// of the lease, from the last renewal that landed); a longer one stops them (test/e2e/leaseStalls.test.ts).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const PER_TOOL = 10;
const OUTAGE_MS = 6000;
/**
 * Runs are stopped four fifths of a lease after the last renewal that landed was sent, and renewals go out every
 * third of a lease: 24 s after, with one every 10 s, leave the outage and PostgreSQL's restart time to spare.
 */
const LEASE_MS = 30_000;

let postgres: StartedPostgres;
let serve: ServeProcess | undefined;
const dir = mkdtempSync(join(tmpdir(), 'closeout-pg-outage-'));

beforeAll(async () => {
  postgres = await startPostgres();
}, 120_000);

afterAll(async () => {
  await serve?.stop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('PostgreSQL stopped for several seconds while tasks run', () => {
  it('finishes every task on its first attempt: none interrupted, none run twice', async () => {
    const database = await postgres.createDatabase();
    const runLog = join(dir, 'runs.jsonl');
    serve = await startServe(['--store', database.connectionString, '--lease-ms', String(LEASE_MS)], 30_000, {
      CLOSEOUT_RUN_LOG: runLog,
    });
    const url = serve.url;
    const taskIds: string[] = [];
    for (let i = 0; i < PER_TOOL; i++) {
      // each runs about 12 s, with a status write every step: through the outage and past it
      for (const [name, args] of [
        ['batch_job', { items: 12, stepMs: 1000 }],
        ['export_report', { pages: 12, pageMs: 1000 }],
      ] as const) {
        const answer = await rpc(url, 'tools/call', { name, arguments: args });
        taskIds.push(answer.result!['taskId'] as string);
      }
    }
    await waitFor('every handler to start', () =>
      readFileSync(runLog, 'utf8').trim().split('\n').length >= taskIds.length ? true : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await postgres.outage(OUTAGE_MS);

    const finals = new Map<string, Record<string, unknown>>();
    await waitFor(
      'every task to finish',
      async () => {
        for (const taskId of taskIds.filter((t) => !finals.has(t))) {
          const task = (await rpc(url, 'tasks/get', { taskId })).result;
          if (task && ['completed', 'failed', 'cancelled'].includes(task['status'] as string)) finals.set(taskId, task);
        }
        return finals.size === taskIds.length ? true : undefined;
      },
      60_000,
      500,
    );
    const notCompleted = taskIds
      .map((taskId): Record<string, unknown> => ({ taskId, ...finals.get(taskId) }))
      .filter((task) => task['status'] !== 'completed')
      .map((task) => ({ status: task['status'], error: task['error'] }));
    expect(notCompleted).toEqual([]);
    for (const taskId of taskIds) {
      const structured = (finals.get(taskId)!['result'] as { structuredContent?: { attempt?: number } })
        .structuredContent;
      if (structured) expect(structured.attempt).toBe(1);
    }
    // every handler started exactly once (the handlers write the run log themselves)
    const starts = readFileSync(runLog, 'utf8')
      .trim()
      .split('\n')
      .map((line) => (JSON.parse(line) as { taskId: string }).taskId);
    expect(starts.length).toBe(taskIds.length);
    expect(new Set(starts).size).toBe(taskIds.length);
    // the outage was noticed and reported (by the handlers' writes, or by a renewal when one fell in it), not as a crash
    expect(serve.child.exitCode).toBeNull();
    expect(serve.stderr()).toMatch(
      /Task store unreachable, keeping \d+ running tasks|PostgreSQL task store: \w+ failed/,
    );
  }, 150_000);

  it('starts while PostgreSQL is down: waits for it, says so once, and serves once it is back', async () => {
    // an instance restarted by its supervisor during the outage used to exit 1 at once ("migrate failed: connect
    // ECONNREFUSED"), so a fleet that lost the database also lost the instances that came back first
    const database = await postgres.createDatabase();
    const down = postgres.outage(4000);
    // the database is stopping or stopped when the instance starts
    await new Promise((resolve) => setTimeout(resolve, 300));
    const started = Date.now();
    const waiting = await startServe(['--store', database.connectionString], 60_000);
    try {
      await down;
      expect(Date.now() - started).toBeGreaterThan(2000);
      expect(waiting.stderr()).toMatch(/waiting for the store .*--store-wait-ms/);
      expect(waiting.stderr().match(/waiting for the store/g)).toHaveLength(1);
      const answer = await rpc(waiting.url, 'tools/call', { name: 'batch_job', arguments: { items: 1, stepMs: 10 } });
      expect(typeof answer.result?.['taskId']).toBe('string');
    } finally {
      await waiting.stop();
    }
  }, 120_000);

  it('gives up on a store it cannot reach after --store-wait-ms, with the reason', async () => {
    const database = await postgres.createDatabase();
    const unreachable = database.connectionString.replace(/:(\d+)\//, ':1/');
    await expect(startServe(['--store', unreachable, '--store-wait-ms', '1500'], 30_000)).rejects.toThrow(
      /ECONNREFUSED/,
    );
  }, 60_000);
});
