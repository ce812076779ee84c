import type { PollIntervalPolicy } from './taskTool.js';

/**
 * The default poll-interval policy: short while a task is young (most finish fast), then a tenth of its age,
 * bounded, so a well-behaved client is cheap to serve (docs/DESIGN.md, "Poll interval").
 */
export const adaptivePollInterval: PollIntervalPolicy = (ageMs) =>
  Math.min(5000, Math.max(500, Math.round(Math.max(0, ageMs) / 10)));

export function toPollIntervalPolicy(option: number | PollIntervalPolicy | undefined): PollIntervalPolicy {
  if (option === undefined) return adaptivePollInterval;
  if (typeof option === 'number') return () => option;
  return option;
}
