// The chaos soak (test/e2e/soak.ts): every submission closes out with the ledger and the store agreeing, no handler
// runs more often than its policy allows, no input is asked twice, nothing is left open, two reads agree, and each
// kind of fault was actually injected and recovered from: kills, pauses past the lease, a second process racing
// resumeAll, client clock steps, PostgreSQL connection drops and outages, stores stalled past a lease (with a fresh
// instance and a resumeAll started the moment each came back), an instance in another PID namespace, and a fleet of
// clients on one PostgreSQL ledger taking up a killed worker's records. SHORT here; `npm run soak` (SOAK_MODE=long)
// runs LONG: more of everything, for eight minutes.
import { describe, expect, it } from 'vitest';

import { type BackendKind, formatReport, LONG, runSoak, SHORT } from './soak.js';

const mode = process.env['SOAK_MODE'] === 'long' ? LONG : SHORT;
// SOAK_BACKENDS=postgres-fleet (comma-separated): only those backends, to look into one of them
const only = process.env['SOAK_BACKENDS']?.split(',') as BackendKind[] | undefined;
// SOAK_PATIENCE=3: three times the time to start an instance, to settle and in all, on a machine too loaded for the
// usual budget
const patience = Number(process.env['SOAK_PATIENCE'] ?? 1);
const config = {
  ...mode,
  ...(only && { backends: only }),
  serveStartMs: mode.serveStartMs * patience,
  settleTimeoutMs: mode.settleTimeoutMs * patience,
  timeoutMs: mode.timeoutMs * patience,
};
const seed = process.env['SOAK_SEED'] ? Number(process.env['SOAK_SEED']) : config.seed;

describe(`chaos soak (${config.name})`, () => {
  it(
    'loses nothing while servers and clients are killed and connections dropped and delayed',
    async () => {
      const report = await runSoak({ ...config, seed });
      console.log(formatReport(report).join('\n'));
      expect(report.violations).toEqual([]);
      expect(report.lost).toEqual([]);
      expect(report.submitted).toBe(config.backends.length * config.clientsPerBackend * config.jobsPerClient);
      // a soak in which a fault never happened proves nothing about it
      expect(report.faults.serverKills).toBeGreaterThan(0);
      expect(report.faults.clientKills).toBeGreaterThan(0);
      expect(report.faults.droppedBefore + report.faults.droppedAfter).toBeGreaterThan(0);
      expect(report.faults.delayed).toBeGreaterThan(0);
      expect(report.faults.clientPauses).toBeGreaterThan(0);
      expect(report.faults.resumeRaces).toBeGreaterThan(0);
      expect(report.faults.clockSteps).toBeGreaterThan(0);
      // a store stalled past a lease on every backend (each fault kind runs once on each first)
      expect(report.faults.storeStalls).toBeGreaterThanOrEqual(config.backends.length);
      // and, the moment each came back, a fresh instance and a resumeAll() that took nothing from a live holder
      expect(report.faults.entrantsAfterStall).toBeGreaterThanOrEqual(config.backends.length);
      expect(report.namespacedStarts).toBeGreaterThan(0);
      if (config.backends.includes('postgres-fleet')) {
        // a fleet on one PostgreSQL ledger: workers were killed while they followed records, and the others took
        // every one of those up before the worker started again (one left is a violation, checked above)
        expect(report.recovered.fleetOrphans).toBeGreaterThan(0);
        expect(report.recovered.fleetTakenUp).toBe(report.recovered.fleetOrphans);
      }
      if (config.backends.includes('postgres') || config.backends.includes('postgres-fleet')) {
        expect(report.faults.connectionDrops).toBeGreaterThan(0);
        expect(report.faults.databaseOutages).toBeGreaterThan(0);
      }
      expect(report.recovered.total).toBeGreaterThan(0);
      expect(report.outcomes).toMatchObject({
        completed: expect.any(Number),
        failed: expect.any(Number),
        cancelled: expect.any(Number),
      });
    },
    config.timeoutMs,
  );
});
