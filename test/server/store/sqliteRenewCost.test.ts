// bench/RESULTS.md section 8a: on SQLite a renewal runs on the serving thread, one statement per step of
// leases, so a step's cost is how long the event loop is blocked. It must not grow with the number of leases the
// instance holds (docs/DESIGN.md, "Rules learned in the field", 8): the statement found its rows through the index on
// lease_owner, visiting every open lease of the instance in every step (a 500-lease step took 6 to 14 times as long
// with 48,000 leases held as with 500). Measured as a ratio within one process, so a loaded machine does not decide it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { afterAll, expect, it } from 'vitest';

import type { SqliteTaskStore } from '../../../src/server/store/sqliteTaskStore.js';
import { sqliteStoreHolding } from '../../support/heldLeases.js';

const OWNER = 'instance-a';
const STEP = 500;
const dir = mkdtempSync(join(tmpdir(), 'closeout-renew-cost-'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('renews a step of leases in the same time whether the instance holds 500 leases or 48,000', async () => {
  const few = await sqliteStoreHolding(dir, STEP, OWNER);
  const many = await sqliteStoreHolding(dir, 48_000, OWNER);
  try {
    const leases = Array.from({ length: STEP }, (_, i) => ({ taskId: `task-${i}`, fence: 1 }));
    const renew = async (store: SqliteTaskStore, round: number) => {
      const started = performance.now();
      const renewed = await store.renewLeases(OWNER, leases, Date.now() + 10_000 + round);
      expect(renewed).toHaveLength(STEP);
      return performance.now() - started;
    };
    // warm-up, then the two stores in turn so both see the same machine
    for (let round = 0; round < 2; round++) await Promise.all([renew(few, round), renew(many, round)]);
    const ratios: number[] = [];
    for (let round = 2; round < 11; round++) ratios.push((await renew(many, round)) / (await renew(few, round)));
    ratios.sort((a, b) => a - b);
    // before: the median ratio was 3.4 to 14 on a loaded machine, after: 1.0 to 1.3
    expect(ratios[4], `time with 48,000 held over time with 500 held, by round: ${ratios.join(', ')}`).toBeLessThan(
      2.2,
    );
  } finally {
    await few.close();
    await many.close();
  }
}, 120_000);
