// The client's self-fence (docs/DESIGN.md, "Rules learned in the field", 13): a round on a record is stopped a fifth of
// a lease before the last confirmed proof of its lease (a renewal, or the record's own claim) plus a lease, renewals
// are asked for from a third of a lease before that, and a renewal that lands in time changes nothing.
import { describe, expect, it } from 'vitest';

import { SelfFence } from '../../../src/client/following/selfFence.js';
import { fenceTimes, heldUntil } from '../../../src/shared/lease/leaseFence.js';
import { FakeClock } from '../fakeClock.js';

const LEASE_MS = 3000;

function fence() {
  const clock = new FakeClock(0);
  const stopped: string[] = [];
  let renewals = 0;
  const self = new SelfFence({
    leaseMs: LEASE_MS,
    clock,
    stop: (recordId) => stopped.push(recordId),
    renew: () => renewals++,
  });
  return { clock, self, stopped, renewals: () => renewals };
}

describe('SelfFence', () => {
  it('shares the server’s arithmetic: stop a fifth, renew from a third of a lease before heldUntil', () => {
    expect(heldUntil(1000, LEASE_MS)).toBe(4000);
    expect(fenceTimes(4000, LEASE_MS)).toEqual({ stopAt: 3400, renewAt: 3000 });
  });

  it('holds nothing it never proved, and a claim proves one record', () => {
    const { self } = fence();
    expect(self.isHeld('r1')).toBe(false);
    self.proven('r1', 0);
    expect(self.isHeld('r1')).toBe(true);
    expect(self.isHeld('r2')).toBe(false);
  });

  it('stops a watched round at four fifths of a lease after the last confirmed proof, asking renewals before', async () => {
    const { clock, self, stopped, renewals } = fence();
    self.renewed(0);
    const unwatch = self.watch('r1');
    await clock.advance(1999);
    expect(renewals()).toBe(0);
    await clock.advance(2);
    expect(renewals()).toBeGreaterThan(0);
    expect(stopped).toEqual([]);
    await clock.advance(398);
    expect(stopped).toEqual([]);
    await clock.advance(1);
    expect(stopped).toEqual(['r1']);
    expect(self.isHeld('r1')).toBe(false);
    unwatch();
    // a renewal landing again lets rounds start
    self.renewed(clock.now());
    expect(self.isHeld('r1')).toBe(true);
  });

  it('changes nothing while renewals land in time', async () => {
    const { clock, self, stopped } = fence();
    self.renewed(0);
    const unwatch = self.watch('r1');
    for (let i = 0; i < 30; i++) {
      await clock.advance(LEASE_MS / 3);
      self.renewed(clock.now() - 50);
    }
    expect(stopped).toEqual([]);
    unwatch();
  });

  it('takes the later of the record’s claim and the process’s renewal', async () => {
    const { clock, self, stopped } = fence();
    self.renewed(0);
    self.proven('r1', 1000);
    const unwatch = self.watch('r1');
    await clock.advance(2401);
    expect(stopped).toEqual([]);
    await clock.advance(1000);
    expect(stopped).toEqual(['r1']);
    unwatch();
  });

  it('does not credit a record with a renewal that went out before its claim was confirmed', async () => {
    // the renewal may have run before the claim: it did not cover the record, whose lease runs from its claim
    const { clock, self, stopped } = fence();
    await clock.advance(300);
    self.proven('r1', 100); // claim sent at 100, confirmed at 300
    await clock.advance(100);
    self.renewed(200); // renewal sent at 200, confirmed at 400
    const unwatch = self.watch('r1');
    expect(self.heldUntil('r1')).toBe(heldUntil(100, LEASE_MS));
    await clock.advance(2100); // 2500: a fifth of a lease before 100 + a lease
    expect(stopped).toEqual(['r1']);
    unwatch();
  });

  it('holds every record no longer than a lease after a claim no renewal has covered yet', async () => {
    // a ledger keeping one expiry per holder takes the claim's, stamped from its send time, for all of them
    const { clock, self } = fence();
    await clock.advance(1050);
    self.renewed(1000);
    expect(self.heldUntil('r2')).toBe(heldUntil(1000, LEASE_MS));
    await clock.advance(50);
    self.proven('r1', 900); // a claim sent before that renewal, confirmed after it
    expect(self.heldUntil('r2')).toBe(heldUntil(900, LEASE_MS));
    await clock.advance(100);
    self.renewed(1200); // sent after the claim was confirmed: it covers every record again
    expect(self.heldUntil('r1')).toBe(heldUntil(1200, LEASE_MS));
    expect(self.heldUntil('r2')).toBe(heldUntil(1200, LEASE_MS));
  });
});
