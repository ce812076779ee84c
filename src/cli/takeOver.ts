/**
 * Taking a record over from a holder whose lease ran out but whom the kernel cannot prove dead: a process in another
 * container or on another host (docs/DESIGN.md, "Rules learned in the field", 1 and 11). A lapsed lease is taken only
 * by a process that has seen the ledger answer promptly for a whole lease, and every command is a process just
 * started, so `resume`, `answer` and `call --idempotency-key` say whose record it is and how long they wait, wait for
 * that (a holder that is alive renews meanwhile and keeps its record), and try once more. The wait is bounded; Ctrl-C
 * ends it with nothing taken.
 */
import { setTimeout as sleep } from 'node:timers/promises';

import { TaskClientError } from '../client/errors.js';
import type { TaskClient } from '../client/index.js';
import type { Ledger, TaskRecord } from '../client/ledger/index.js';
import { CliError } from './cliError.js';
import { EXIT } from './exitCodes.js';
import type { Output } from './terminal/output.js';
import { formatDuration, recordRef, refOf } from './terminal/recordView.js';

/** Past the time the gate should open in, how long a wait goes on (a renewal answered a little late). */
const WAIT_SLACK_MS = 5_000;

/** How a wait for the takeover gate ended: open, Ctrl-C, or the ledger did not stay healthy for long enough. */
export type TakeOverWait = 'open' | 'interrupted' | 'stalled';

/** Whether `record` is held by another process on a lease that ran out (`now`: the ledger's clock). */
export function onLapsedLease(record: TaskRecord, client: TaskClient, now: number): boolean {
  const { leaseHolder, leaseExpiresAt } = record;
  return leaseHolder !== undefined && leaseHolder !== client.leaseHolder && (leaseExpiresAt ?? Infinity) < now;
}

/**
 * Say, for each record, whose it is and how long this process waits before taking it over, and wait until `client`
 * may take lapsed leases (its takeover gate is open).
 */
export async function waitToTakeOver(
  out: Output,
  client: TaskClient,
  records: readonly TaskRecord[],
  now: number,
): Promise<TakeOverWait> {
  const waitMs = client.takeoverOpensInMs() + WAIT_SLACK_MS;
  for (const record of records) {
    const ranOut = formatDuration(now - (record.leaseExpiresAt ?? now));
    out.event({
      event: 'waiting',
      ...recordRef(record),
      leaseHolder: record.leaseHolder ?? null,
      leaseExpiresAt: record.leaseExpiresAt ?? null,
      waitMs,
    });
    out.aside(
      out.ce.yellow(
        `closeout: ${record.toolName} ${refOf(record)} is held by ${record.leaseHolder ?? 'another process'}, whose lease ran out ${ranOut} ago; waiting up to ${formatDuration(waitMs)} for it to renew before taking it over (Ctrl-C leaves it as it is)`,
      ),
    );
  }
  const deadline = performance.now() + waitMs;
  const interrupted = new AbortController();
  const onSigint = () => interrupted.abort();
  process.on('SIGINT', onSigint);
  try {
    for (;;) {
      const left = client.takeoverOpensInMs();
      if (left === 0) return 'open';
      const untilDeadline = deadline - performance.now();
      if (untilDeadline <= 0) break;
      await sleep(Math.min(left + 20, untilDeadline), undefined, { signal: interrupted.signal }).catch(() => undefined);
      if (interrupted.signal.aborted) return 'interrupted';
    }
  } finally {
    process.off('SIGINT', onSigint);
  }
  out.aside(
    `closeout: the ledger did not answer promptly for a whole lease meanwhile, so a stalled ledger cannot be told from a dead holder: nothing was taken over; run the command again`,
  );
  return 'stalled';
}

/**
 * `attempt` (an attach, or a call with a known idempotency key), and when it finds the record held by another process
 * on a lease that ran out: the wait above, then `attempt` once more. Ctrl-C during the wait exits 130.
 */
export async function takingOver<T>(
  out: Output,
  ledger: Ledger,
  client: TaskClient,
  attempt: () => Promise<T>,
): Promise<T> {
  try {
    return await attempt();
  } catch (error) {
    if (!(error instanceof TaskClientError && error.code === 'leased-elsewhere' && error.recordId)) throw error;
    const record = await ledger.get(error.recordId);
    if (!record || !onLapsedLease(record, client, ledger.now())) throw error;
    const waited = await waitToTakeOver(out, client, [record], ledger.now());
    if (waited === 'interrupted') {
      throw new CliError(`interrupted: ${refOf(record)} was not taken over and stays as it was`, EXIT.interrupted);
    }
    if (waited === 'stalled') throw error;
    return attempt();
  }
}
