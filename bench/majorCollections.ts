import { constants, PerformanceObserver } from 'node:perf_hooks';

/** V8's full collections in this process from now on, and their main-thread pauses (perf_hooks `gc` entries). */
export interface MajorCollections {
  count: number;
  ms: number;
}

/** Start counting this process's full collections; the object returned is kept up to date as they are reported. */
export function countMajorCollections(): MajorCollections {
  const counted: MajorCollections = { count: 0, ms: 0 };
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const { detail } = entry as { detail?: { kind?: number } };
      if (detail?.kind !== constants.NODE_PERFORMANCE_GC_MAJOR) continue;
      counted.count++;
      counted.ms += entry.duration;
    }
  }).observe({ entryTypes: ['gc'] });
  return counted;
}
