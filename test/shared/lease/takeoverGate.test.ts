// When a lapsed lease may be taken (docs/DESIGN.md, "Rules learned in the field", 11; src/shared/lease/takeoverGate.ts): only once
// the taker has seen the store answer promptly, with no gap, for a whole lease. A fresh instance knows nothing yet, so
// it takes no lapsed lease at start (it might have lapsed in a stall nobody could renew through); it takes a dead
// holder's task within two leases of its start, and a lease handed back (a graceful shutdown) at once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../../src/server/taskServer.js';
import { TakeoverGate } from '../../../src/shared/lease/takeoverGate.js';
import { waitFor } from '../../support/waitFor.js';

const LEASE_MS = 2000;
const open: Array<{ close(): Promise<void> }> = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const closable of open.splice(0).reverse()) await closable.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A store holding one open resumable task leased to `holder` until `leaseExpiresAt`. */
async function storeWithTask(
  holder: string,
  leaseExpiresAt: number,
): Promise<{ store: SqliteTaskStore; taskId: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-gate-'));
  dirs.push(dir);
  const store = new SqliteTaskStore(join(dir, 'tasks.db'));
  open.push(store);
  const taskId = 'task-left-behind';
  await store.create({
    taskId,
    principal: 'alice',
    toolName: 'job',
    arguments: {},
    createdAt: Date.now() - 60_000,
    ttlMs: null,
    pollIntervalMs: 1000,
    resumable: true,
    leaseHolder: holder,
    leaseExpiresAt,
  });
  return { store, taskId };
}

function taker(store: SqliteTaskStore): TaskServer {
  const tasks = new TaskServer({ store, leaseMs: LEASE_MS, instanceId: 'taker', onError: () => {} });
  tasks.registerTool('job', { task: { support: 'optional', resumable: true } }, async (_args, ctx) => {
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
    return { content: [] };
  });
  open.push(tasks);
  return tasks;
}

describe('a fresh instance and lapsed leases', () => {
  it('takes a lease that lapsed before it started only after a lease of healthy store, within two leases', async () => {
    // a holder id without the kernel's proof: only its lease says whether it lives
    const { store, taskId } = await storeWithTask('instance-elsewhere', Date.now() - 5000);
    const tasks = taker(store);
    const startedAt = performance.now();
    await tasks.start();
    expect((await store.get(taskId))?.leaseHolder).toBe('instance-elsewhere');
    await waitFor(
      'the taker to claim the task',
      async () => ((await store.get(taskId))?.leaseHolder === 'taker' ? true : undefined),
      10_000,
      20,
    );
    const tookMs = performance.now() - startedAt;
    expect(tookMs).toBeGreaterThanOrEqual(LEASE_MS);
    expect(tookMs).toBeLessThan(2 * LEASE_MS);
  });

  it('takes a lease handed back by a graceful shutdown at once', async () => {
    const { store, taskId } = await storeWithTask('instance-stopped', 0);
    await taker(store).start();
    expect((await store.get(taskId))?.leaseHolder).toBe('taker');
  });
});

describe('TakeoverGate', () => {
  let clock = 0;
  const gate = () => new TakeoverGate({ leaseMs: 1000, everyMs: 300, now: () => clock });
  const answer = (g: TakeoverGate, tookMs: number) => {
    const sentAt = clock;
    clock += tookMs;
    g.answered(sentAt);
  };
  /** Calls every 300 ms, each answered after `tookMs`, for `forMs`. */
  const healthyFor = (g: TakeoverGate, forMs: number, tookMs = 5) => {
    for (const end = clock + forMs; clock < end; clock += 300 - tookMs) answer(g, tookMs);
  };

  it('opens one healthy lease after the first answer, not before', () => {
    clock = 0;
    const g = gate();
    expect(g.isOpen()).toBe(false);
    healthyFor(g, 900);
    expect(g.isOpen()).toBe(false);
    healthyFor(g, 300);
    expect(g.isOpen()).toBe(true);
  });

  it('closes for a whole lease after a failure, a late answer, or a gap between calls', () => {
    for (const stall of [
      (g: TakeoverGate) => g.failed(),
      (g: TakeoverGate) => answer(g, 250), // over a fifth of the lease
      (_g: TakeoverGate) => (clock += 1000), // nothing sent for longer than the calls' period and a fifth of a lease
    ]) {
      clock = 0;
      const g = gate();
      healthyFor(g, 1500);
      expect(g.isOpen()).toBe(true);
      stall(g);
      healthyFor(g, 900);
      expect(g.isOpen()).toBe(false);
      healthyFor(g, 400);
      expect(g.isOpen()).toBe(true);
    }
  });

  it('stays open through answers a little slow, within a fifth of the lease', () => {
    clock = 0;
    const g = gate();
    healthyFor(g, 1500, 150);
    expect(g.isOpen()).toBe(true);
  });
});
