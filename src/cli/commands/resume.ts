/**
 * `closeout resume [TASK_ID]`: take up every open task in the ledger (or one) after a detach, a Ctrl-C or a crash
 * (docs/REQUIREMENTS.md S12): each is queried once first (S7), then followed until it closes out, with input asked
 * where needed. One line per task as it closes out. An `expired` record named by TASK_ID is checked again, and followed
 * when the server still knows its task.
 */
import type { Command } from 'commander';

import type { TaskClient } from '../../client/index.js';
import type { Ledger, TaskRecord } from '../../client/ledger/index.js';
import { isFollowable } from '../../client/ledger/index.js';
import { outcomeOf } from '../../client/taskHandle.js';
import type { JsonFlags, LedgerFlags } from '../commonOptions.js';
import { addAnswerOptions, addJsonOption, addLedgerOption, addTaskIdArgument } from '../commonOptions.js';
import { commandContext, openFollowingSession } from '../context.js';
import { EXIT, exitCodeOf, worstExitCode } from '../exitCodes.js';
import { unknownTask } from '../session.js';
import { onLapsedLease, takingOver, waitToTakeOver } from '../takeOver.js';
import type { AnswerFlags } from '../terminal/elicitationPrompt.js';
import { presetFrom } from '../terminal/elicitationPrompt.js';
import { explain } from '../terminal/explain.js';
import type { Follower } from '../terminal/follow.js';
import type { Output } from '../terminal/output.js';
import { recordRef, resultLines, stateWord } from '../terminal/recordView.js';
import { serverLine } from '../terminal/serverText.js';
import { OPEN_STATES } from './ls.js';

type ResumeFlags = JsonFlags & LedgerFlags & AnswerFlags;

export function registerResume(program: Command): void {
  const command = program
    .command('resume')
    .description('Resume every open task in the ledger (or one) and follow them until they close out');
  addTaskIdArgument(command, 'only this task (a taskId, a unique prefix, a record id or an idempotency key)', true);
  addAnswerOptions(command);
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON object per line per event; each task ends with its close-out');
  command.action(runResume);
}

async function runResume(ref: string | undefined, flags: ResumeFlags): Promise<void> {
  const context = commandContext(flags);
  const { out, ledgerPath } = context;
  const opened = await openFollowingSession(context, presetFrom(flags));
  if (!opened) {
    if (ref !== undefined) throw unknownTask(ref, ledgerPath);
    out.event({ event: 'resume', ledger: ledgerPath, open: 0 });
    out.line(`nothing to resume: there is no ledger at ${ledgerPath} yet`);
    return;
  }
  const { session, following } = opened;
  const codes: number[] = [];
  let endpoint: string | undefined;
  try {
    following.arm();
    if (ref !== undefined) {
      const record = await session.require(ref);
      endpoint = record.endpoint;
      out.event({ event: 'resume', ledger: ledgerPath, open: isFollowable(record.localState) ? 1 : 0 });
      if (record.localState === 'expired' && record.taskId) {
        // checked again: a wrong credential or a restored server can make a live task look gone
        const client = await session.client(record.endpoint);
        const handle = await client.recheck(record.recordId);
        if (handle) following.follow(handle, record.endpoint, 'resumed');
        else codes.push(reportClosed(out, (await session.ledger.get(record.recordId)) ?? record));
      } else if (!isFollowable(record.localState)) {
        codes.push(reportClosed(out, record));
      } else {
        const client = await session.client(record.endpoint);
        const handle = await takingOver(out, session.ledger, client, () => client.attach(record.recordId));
        following.follow(handle, record.endpoint, 'resumed');
      }
    } else {
      const open = (await session.ledger.list()).filter((r) => OPEN_STATES.includes(r.localState));
      out.event({ event: 'resume', ledger: ledgerPath, open: open.length });
      if (open.length === 0) out.line(`nothing to resume: no open tasks in ${ledgerPath}`);
      for (const server of new Set(open.map((r) => r.endpoint))) {
        endpoint = server;
        let client;
        try {
          client = await session.client(server);
        } catch (error) {
          const count = open.filter((r) => r.endpoint === server).length;
          out.aside(`closeout: ${serverLine((error as Error).message)}; its ${count} open task(s) stay in the ledger`);
          codes.push(EXIT.usage);
          continue;
        }
        const report = await client.resumeAll();
        for (const handle of report.resumed) following.follow(handle, server, 'resumed');
        for (const record of report.unknownOutcome) codes.push(reportClosed(out, record));
        // records whose holder's lease ran out wait for this process to tell a dead holder from a stalled ledger
        const submissions = open.filter((r) => r.endpoint === server && r.localState === 'submitting');
        const lapsed = await onLapsedLeases(session.ledger, client, [...report.leasedElsewhere, ...submissions]);
        for (const record of report.leasedElsewhere) {
          if (!lapsed.some((r) => r.recordId === record.recordId)) reportElsewhere(out, record);
        }
        if (lapsed.length > 0) codes.push(...(await resumeLapsed(out, session.ledger, client, following, lapsed)));
      }
    }
    const closeOuts = await following.done();
    process.exitCode = worstExitCode([...codes, ...closeOuts.map((c) => c.exitCode)]);
  } catch (error) {
    throw explain(error, { ledgerPath, endpoint });
  } finally {
    following.stop();
    await session.close();
  }
}

/** Of `records`, those (as the ledger has them now) held by another process on a lease that ran out. */
async function onLapsedLeases(
  ledger: Ledger,
  client: TaskClient,
  records: readonly TaskRecord[],
): Promise<TaskRecord[]> {
  const now = ledger.now();
  const lapsed: TaskRecord[] = [];
  for (const { recordId } of records) {
    const record = await ledger.get(recordId);
    if (record && record.localState !== 'terminal' && onLapsedLease(record, client, now)) lapsed.push(record);
  }
  return lapsed;
}

/**
 * Records on lapsed leases of another holder: waited for until this process may take them over, then resumed again;
 * what is left is another process's (its holder renewed), and a submission settled meanwhile is reported closed.
 */
async function resumeLapsed(
  out: Output,
  ledger: Ledger,
  client: TaskClient,
  following: Follower,
  lapsed: readonly TaskRecord[],
): Promise<number[]> {
  const codes: number[] = [];
  const endpoint = client.endpoint;
  const waited = await waitToTakeOver(out, client, lapsed, ledger.now());
  if (waited === 'interrupted') codes.push(EXIT.interrupted);
  const report = waited === 'open' ? await client.resumeAll() : undefined;
  const reported = new Set<string>();
  for (const handle of report?.resumed ?? []) {
    following.follow(handle, endpoint, 'resumed');
    reported.add(handle.recordId);
  }
  for (const record of report?.unknownOutcome ?? []) {
    codes.push(reportClosed(out, record));
    reported.add(record.recordId);
  }
  for (const { recordId } of lapsed) {
    if (reported.has(recordId)) continue;
    const record = await ledger.get(recordId);
    if (!record) continue;
    // the take-over this client arms for when its gate opens may have settled a submission first
    if (record.localState === 'submitting' || isFollowable(record.localState)) reportElsewhere(out, record);
    else codes.push(reportClosed(out, record));
  }
  return codes;
}

/** A record that closed out before: its close-out again, from the ledger alone. */
function reportClosed(out: Output, record: TaskRecord): number {
  const outcome = outcomeOf(record);
  const ref = record.taskId ?? record.recordId;
  const c = out.c;
  if (record.localState === 'unknown-outcome' || !outcome) {
    out.event({
      event: 'closeout',
      ...recordRef(record),
      outcome: record.localState,
      exitCode: EXIT.expired,
      reason: record.terminalReason ?? null,
    });
    out.line(
      `${c.red(`? ${record.localState}`)}  ${record.toolName} ${c.bold(ref)}: ${serverLine(record.terminalReason ?? 'no reason recorded')}; it may or may not have run: \`closeout resubmit ${ref}\` sends it again${record.idempotencyKey ? ' with the same idempotency key' : ''}`,
    );
    return EXIT.expired;
  }
  const exitCode = exitCodeOf(outcome);
  out.event({
    event: 'closeout',
    ...recordRef(record),
    outcome: outcome.kind,
    status: record.status ?? null,
    exitCode,
    ...(outcome.kind === 'completed' && { result: outcome.result }),
    ...(outcome.kind === 'failed' && { error: outcome.error }),
    ...(outcome.kind === 'expired' && { reason: outcome.reason }),
    already: true,
  });
  out.line(`${c.dim('already closed out:')} ${stateWord(record)}  ${record.toolName} ${c.bold(ref)}`);
  if (outcome.kind === 'completed') for (const line of resultLines(outcome.result, c)) out.line(line);
  if (outcome.kind === 'failed') out.line(`  ${outcome.error.code} ${serverLine(outcome.error.message)}`);
  return exitCode;
}

function reportElsewhere(out: Output, record: TaskRecord): void {
  out.event({ event: 'elsewhere', ...recordRef(record), leaseHolder: record.leaseHolder ?? null });
  out.line(
    `${out.c.yellow('↷ followed elsewhere')}  ${record.toolName} ${out.c.bold(record.taskId ?? record.recordId)}: by ${record.leaseHolder ?? 'another process'} (its lease ends if that process is gone)`,
  );
}
