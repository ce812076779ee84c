import { setTimeout as sleep } from 'node:timers/promises';

/** Waits `ms`, or throws as soon as `signal` aborts (so a cancelled demo task stops at once). */
export async function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal });
}
