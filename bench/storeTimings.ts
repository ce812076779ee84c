/**
 * A TaskStore that times the background calls a TaskServer makes (lease renewal, orphan claims, expiry, purge) and
 * passes everything through unchanged: the benchmarks of bench/RESULTS.md section 8 read sweep durations and renewal
 * periods from it.
 */
import { performance } from 'node:perf_hooks';

import type { TaskStore } from 'closeout/server';

export interface StoreCall {
  name: 'renewLeases' | 'claimOrphans' | 'expireOverdue' | 'purge';
  /** performance.now() at the call and when its promise settled. */
  start: number;
  end: number;
  /** renewLeases: how many leases, and the expiry it set (epoch ms). */
  leases?: number;
  until?: number;
  /** purge: rows it removed (tasks and tombstones). */
  removed?: number;
}

const TIMED = new Set<string>(['renewLeases', 'claimOrphans', 'expireOverdue', 'purge']);

export function timedStore(store: TaskStore): { store: TaskStore; calls: StoreCall[] } {
  const calls: StoreCall[] = [];
  const proxy = new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const method = (value as (...args: unknown[]) => unknown).bind(target);
      if (typeof property !== 'string' || !TIMED.has(property)) return method;
      return async (...args: unknown[]) => {
        const call: StoreCall = { name: property as StoreCall['name'], start: performance.now(), end: 0 };
        if (property === 'renewLeases') {
          call.leases = (args[1] as unknown[]).length;
          call.until = args[2] as number;
        }
        try {
          const result = (await method(...args)) as unknown;
          if (property === 'purge') call.removed = result as number;
          return result;
        } finally {
          call.end = performance.now();
          calls.push(call);
        }
      };
    },
  });
  return { store: proxy, calls };
}
