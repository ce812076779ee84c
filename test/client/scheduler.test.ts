// Invariants: polls follow the server's pollIntervalMs as it changes, clamped to [floor, cap] with bounded jitter;
// transport failures back off exponentially (Retry-After is a lower bound) and never stop polling; one timer serves
// every task; polls in flight are bounded; nothing is polled after `done` (no tail polls).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import type { PollPolicy, PollVerdict } from '../../src/client/core/scheduler.js';
import {
  backoffDelay,
  DEFAULT_POLL_POLICY,
  nextPollDelay,
  pollGridMs,
  PollScheduler,
} from '../../src/client/core/scheduler.js';
import { FakeClock, settle } from './fakeClock.js';

const POLICY: PollPolicy = {
  floorMs: 100,
  capMs: 10_000,
  defaultIntervalMs: 1_000,
  jitterRatio: 0.2,
  backoffBaseMs: 500,
  backoffCapMs: 8_000,
  maxRetryAfterMs: 60_000,
  maxConcurrentPolls: 4,
  tickMs: 0, // exact times, so the policy's arithmetic shows; the tick has a test of its own
};

/** A scheduler whose poll answers come from a script per key, recording when each poll started. */
function harness(
  script: (key: string, n: number) => PollVerdict,
  options: { random?: () => number; policy?: Partial<PollPolicy> } = {},
) {
  const clock = new FakeClock();
  const polls: Array<{ key: string; at: number }> = [];
  const counts = new Map<string, number>();
  const scheduler = new PollScheduler({
    clock,
    random: options.random ?? (() => 0),
    policy: { ...POLICY, ...options.policy },
    poll: async (key) => {
      const n = counts.get(key) ?? 0;
      counts.set(key, n + 1);
      polls.push({ key, at: clock.now() });
      return script(key, n);
    },
  });
  const gaps = (key: string) => {
    const times = polls.filter((poll) => poll.key === key).map((poll) => poll.at);
    return times.slice(1).map((time, i) => time - (times[i] as number));
  };
  return { clock, scheduler, polls, gaps };
}

describe('nextPollDelay', () => {
  it('follows the server interval inside [floor, cap]', () => {
    expect(nextPollDelay(2_500, POLICY, () => 0)).toBe(2_500);
    expect(nextPollDelay(1, POLICY, () => 0)).toBe(POLICY.floorMs);
    expect(nextPollDelay(86_400_000, POLICY, () => 0.99)).toBe(POLICY.capMs);
    expect(nextPollDelay(undefined, POLICY, () => 0)).toBe(POLICY.defaultIntervalMs);
  });

  it('adds jitter only upward and never beyond jitterRatio or the cap', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 100_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (ms, r) => {
          const delay = nextPollDelay(ms, POLICY, () => r);
          const base = Math.min(POLICY.capMs, Math.max(POLICY.floorMs, ms));
          expect(delay).toBeGreaterThanOrEqual(base);
          expect(delay).toBeLessThanOrEqual(Math.min(POLICY.capMs, base * (1 + POLICY.jitterRatio)));
          expect(delay).toBeGreaterThanOrEqual(POLICY.floorMs);
        },
      ),
    );
  });

  it('stays within base * (1 + jitterRatio) when random() is just under 1, where a sum rounds one ulp over', () => {
    // found by the property above in a CI run: 388 + 388 * 0.2 * (1 - 2^-53) = 465.6 > 388 * 1.2 = 465.59999999999997
    expect(nextPollDelay(388, POLICY, () => 1 - 2 ** -53)).toBeLessThanOrEqual(388 * (1 + POLICY.jitterRatio));
  });
});

describe('backoffDelay', () => {
  it('doubles per consecutive failure up to the cap, with at least half of it kept', () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, undefined, POLICY, () => 1))).toEqual([
      500, 1_000, 2_000, 4_000, 8_000, 8_000,
    ]);
    expect(backoffDelay(3, undefined, POLICY, () => 0)).toBe(1_000);
  });

  it('never goes below the floor nor below a Retry-After (clamped to maxRetryAfterMs)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.option(fc.integer({ min: 0, max: 10_000_000 }), { nil: undefined }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (failures, retryAfterMs, r) => {
          const delay = backoffDelay(failures, retryAfterMs, POLICY, () => r);
          expect(delay).toBeGreaterThanOrEqual(POLICY.floorMs);
          if (retryAfterMs !== undefined) {
            expect(delay).toBeGreaterThanOrEqual(Math.min(retryAfterMs, POLICY.maxRetryAfterMs));
          } else {
            expect(delay).toBeLessThanOrEqual(POLICY.backoffCapMs);
          }
        },
      ),
    );
  });
});

describe('PollScheduler', () => {
  it('polls at each new pollIntervalMs the server suggests', async () => {
    const intervals = [300, 1_200, 150, 4_000];
    const { clock, scheduler, gaps } = harness((_key, n) => ({ kind: 'continue', pollIntervalMs: intervals[n] }));
    scheduler.schedule('t');
    await clock.advance(10_000);
    expect(gaps('t').slice(0, 4)).toEqual([300, 1_200, 150, 4_000]);
  });

  it('never polls below the floor or waits beyond the cap', async () => {
    const fast = harness(() => ({ kind: 'continue', pollIntervalMs: 1 }));
    fast.scheduler.schedule('t');
    await fast.clock.advance(1_000);
    expect(fast.gaps('t').length).toBeGreaterThan(5);
    expect(new Set(fast.gaps('t'))).toEqual(new Set([POLICY.floorMs]));

    const slow = harness(() => ({ kind: 'continue', pollIntervalMs: 3_600_000 }));
    slow.scheduler.schedule('t');
    await slow.clock.advance(35_000);
    expect(new Set(slow.gaps('t'))).toEqual(new Set([POLICY.capMs]));
  });

  it('keeps jitter within its bounds', async () => {
    let i = 0;
    const randoms = [0, 0.5, 0.999, 0.25];
    const { clock, scheduler, gaps } = harness(() => ({ kind: 'continue', pollIntervalMs: 1_000 }), {
      random: () => randoms[i++ % randoms.length] as number,
    });
    scheduler.schedule('t');
    await clock.advance(20_000);
    const observed = gaps('t');
    expect(observed.length).toBeGreaterThan(10);
    for (const gap of observed) {
      expect(gap).toBeGreaterThanOrEqual(1_000);
      expect(gap).toBeLessThanOrEqual(1_200);
    }
    expect(new Set(observed).size).toBeGreaterThan(1);
  });

  it('backs off exponentially on failures, then returns to the server interval', async () => {
    const outcomes: PollVerdict[] = [
      { kind: 'retry' },
      { kind: 'retry' },
      { kind: 'retry' },
      { kind: 'retry' },
      { kind: 'continue', pollIntervalMs: 700 },
      { kind: 'continue', pollIntervalMs: 700 },
    ];
    const { clock, scheduler, gaps } = harness((_key, n) => outcomes[n] ?? { kind: 'done' }, { random: () => 1 });
    scheduler.schedule('t');
    await clock.advance(60_000);
    // random 1 keeps the full exponential step: 500, 1000, 2000, 4000; then the server's 700 (+20% jitter at r=1)
    expect(gaps('t')).toEqual([500, 1_000, 2_000, 4_000, 840, 840]);
  });

  it('honours Retry-After as a lower bound', async () => {
    const outcomes: PollVerdict[] = [{ kind: 'retry', retryAfterMs: 7_000 }, { kind: 'continue' }];
    const { clock, scheduler, gaps } = harness((_key, n) => outcomes[n] ?? { kind: 'done' });
    scheduler.schedule('t');
    await clock.advance(30_000);
    expect(gaps('t')[0]).toBe(7_000);
  });

  it('never polls again after done (no tail polls), nor after remove during a poll', async () => {
    const { clock, scheduler, polls } = harness((key, n) =>
      key === 'done-at-3' && n === 2 ? { kind: 'done' } : { kind: 'continue', pollIntervalMs: 200 },
    );
    scheduler.schedule('done-at-3');
    await clock.advance(10_000);
    expect(polls.filter((poll) => poll.key === 'done-at-3')).toHaveLength(3);
    expect(scheduler.has('done-at-3')).toBe(false);

    let release!: () => void;
    const slow = new PollScheduler({
      clock,
      random: () => 0,
      policy: POLICY,
      poll: () => new Promise<PollVerdict>((resolve) => (release = () => resolve({ kind: 'continue' }))),
    });
    let count = 0;
    const counting = new PollScheduler({
      clock,
      random: () => 0,
      policy: POLICY,
      poll: async () => {
        count += 1;
        return { kind: 'continue' };
      },
    });
    slow.schedule('x');
    counting.schedule('y');
    await clock.advance(0);
    counting.remove('y');
    slow.remove('x');
    release();
    await clock.advance(60_000);
    expect(count).toBe(1);
    expect(slow.size).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('serves every task with one timer', async () => {
    const { clock, scheduler, polls } = harness(() => ({ kind: 'continue', pollIntervalMs: 1_000 }), {
      policy: { maxConcurrentPolls: 1_000 },
    });
    for (let i = 0; i < 500; i += 1) scheduler.schedule(`t${i}`, clock.now() + (i % 50) * 10);
    expect(clock.pendingTimers).toBe(1);
    await clock.advance(2_500);
    expect(clock.pendingTimers).toBe(1);
    expect(new Set(polls.map((poll) => poll.key)).size).toBe(500);
  });

  it('bounds the polls in flight and starts waiting ones as slots free', async () => {
    const clock = new FakeClock();
    const releases: Array<() => void> = [];
    let inFlight = 0;
    let peak = 0;
    const scheduler = new PollScheduler({
      clock,
      random: () => 0,
      policy: { ...POLICY, maxConcurrentPolls: 3 },
      poll: () =>
        new Promise<PollVerdict>((resolve) => {
          inFlight += 1;
          peak = Math.max(peak, inFlight);
          releases.push(() => {
            inFlight -= 1;
            resolve({ kind: 'done' });
          });
        }),
    });
    for (let i = 0; i < 10; i += 1) scheduler.schedule(`t${i}`);
    await clock.advance(0);
    expect(scheduler.inFlight).toBe(3);
    let finished = 0;
    while (releases.length > 0) {
      releases.shift()?.();
      finished += 1;
      await settle();
      expect(scheduler.inFlight).toBeLessThanOrEqual(3);
    }
    expect(finished).toBe(10);
    expect(peak).toBe(3);
    expect(scheduler.size).toBe(0);
  });

  it('tells which keys fell due at one wake-up before any of their polls starts, all of them at once', async () => {
    const clock = new FakeClock();
    const events: string[] = [];
    const scheduler = new PollScheduler({
      clock,
      random: () => 0,
      policy: { ...POLICY, maxConcurrentPolls: 2 },
      poll: async (key) => {
        events.push(`poll ${key}`);
        return { kind: 'done' };
      },
      onDue: (keys) => events.push(`due ${keys.join(',')}`),
    });
    const start = clock.now();
    for (const key of ['a', 'b', 'c']) scheduler.schedule(key, start + 1_000);
    scheduler.schedule('d', start + 2_000);
    scheduler.schedule('gone', start + 1_000);
    scheduler.remove('gone');
    await clock.advance(2_000);
    expect(events).toEqual(['due a,b,c', 'poll a', 'poll b', 'poll c', 'due d', 'poll d']);
  });

  it('treats a poll that throws as a failure: backs off and keeps the task', async () => {
    const clock = new FakeClock();
    const errors: unknown[] = [];
    const at: number[] = [];
    const scheduler = new PollScheduler({
      clock,
      random: () => 1,
      policy: POLICY,
      poll: async () => {
        at.push(clock.now());
        if (at.length < 3) throw new Error('disk full');
        return { kind: 'done' };
      },
      onPollError: (_key, error) => errors.push(error),
    });
    scheduler.schedule('t');
    await clock.advance(10_000);
    expect(errors).toHaveLength(2);
    expect(at.slice(1).map((time, i) => time - (at[i] as number))).toEqual([500, 1_000]);
    expect(scheduler.has('t')).toBe(false);
  });

  it('applies a reschedule asked during a poll, but never closer than the floor', async () => {
    const clock = new FakeClock();
    const at: number[] = [];
    let resolvePoll!: (outcome: PollVerdict) => void;
    const scheduler = new PollScheduler({
      clock,
      random: () => 0,
      policy: POLICY,
      poll: () => {
        at.push(clock.now());
        return new Promise<PollVerdict>((resolve) => (resolvePoll = resolve));
      },
    });
    scheduler.schedule('t');
    await clock.advance(0);
    scheduler.schedule('t', clock.now());
    resolvePoll({ kind: 'continue', pollIntervalMs: 5_000 });
    await clock.advance(POLICY.floorMs);
    expect(at).toHaveLength(2);
    expect((at[1] as number) - (at[0] as number)).toBe(POLICY.floorMs);
  });

  it('rounds due times up to the tick: polls due close together share one wake-up, none is early', async () => {
    const { clock, scheduler, polls } = harness(() => ({ kind: 'continue', pollIntervalMs: 60_000 }), {
      policy: { tickMs: 100, maxConcurrentPolls: 100 },
    });
    const asked = new Map<string, number>();
    for (let i = 0; i < 50; i++) {
      const at = clock.now() + 7 + i * 19;
      asked.set(`k${i}`, at);
      scheduler.schedule(`k${i}`, at);
    }
    await clock.advance(1_200);
    expect(polls).toHaveLength(50);
    for (const { key, at } of polls) {
      const due = asked.get(key) as number;
      expect(at).toBeGreaterThanOrEqual(due);
      expect(at - due).toBeLessThan(100);
      expect(at % 100).toBe(0);
    }
    // 50 due times over ~1 s: at most 11 distinct wake-ups
    expect(new Set(polls.map((poll) => poll.at)).size).toBeLessThanOrEqual(11);
    scheduler.stop();
  });

  it('rounds a poll 300 ticks away or more up to ten ticks: at most a thirtieth later, never early', async () => {
    const { clock, scheduler, polls } = harness(() => ({ kind: 'continue', pollIntervalMs: 60_000 }), {
      policy: { tickMs: 100, maxConcurrentPolls: 100 },
    });
    const start = clock.now();
    const asked = new Map<string, number>();
    // 50 due times over ~2 s, 30 s away (the waiting client of bench/RESULTS.md, section 22)
    for (let i = 0; i < 50; i++) {
      const at = start + 30_000 + 7 + i * 41;
      asked.set(`k${i}`, at);
      scheduler.schedule(`k${i}`, at);
    }
    // one due 29.9 s away keeps the tick
    scheduler.schedule('near', start + 29_950);
    await clock.advance(33_000);
    expect(polls).toHaveLength(51);
    for (const { key, at } of polls.filter((poll) => poll.key !== 'near')) {
      const due = asked.get(key) as number;
      expect(at).toBeGreaterThanOrEqual(due);
      expect(at - due).toBeLessThanOrEqual((due - start) / 30);
      expect(at % 1_000).toBe(0);
    }
    expect(new Set(polls.filter((poll) => poll.key !== 'near').map((poll) => poll.at)).size).toBeLessThanOrEqual(3);
    expect(polls.find((poll) => poll.key === 'near')?.at).toBe(start + 30_000);
    expect(pollGridMs(29_999, 100)).toBe(100);
    expect(pollGridMs(30_000, 100)).toBe(1_000);
    expect(pollGridMs(60_000, 0)).toBe(0);
    scheduler.stop();
  });

  it('ships a default policy with a sane floor and cap', () => {
    expect(DEFAULT_POLL_POLICY.floorMs).toBeGreaterThan(0);
    expect(DEFAULT_POLL_POLICY.capMs).toBeGreaterThan(DEFAULT_POLL_POLICY.floorMs);
  });
});
