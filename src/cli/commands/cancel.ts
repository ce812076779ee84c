/**
 * `closeout cancel TASK_ID`: send `tasks/cancel` and record the intent (docs/REQUIREMENTS.md S11). Cancellation is
 * cooperative: the server acknowledges the intent, the work stops when it notices, and the task may still complete. The
 * command says so and shows the state it observes for a moment after.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';

import { TaskClientError } from '../../client/errors.js';
import type { TaskRecord } from '../../client/ledger/index.js';
import { isFollowable } from '../../client/ledger/index.js';
import type { TaskHandle } from '../../client/taskHandle.js';
import { CliError } from '../cliError.js';
import type { JsonFlags, LedgerFlags } from '../commonOptions.js';
import { addJsonOption, addLedgerOption, addTaskIdArgument } from '../commonOptions.js';
import { commandContext } from '../context.js';
import { EXIT } from '../exitCodes.js';
import { ClientSession, unknownTask } from '../session.js';
import { explain } from '../terminal/explain.js';
import { formatDuration, paintState, stateWord } from '../terminal/recordView.js';
import { serverLine } from '../terminal/serverText.js';

interface CancelFlags extends JsonFlags, LedgerFlags {
  waitMs: number;
}

export function registerCancel(program: Command): void {
  const command = program
    .command('cancel')
    .description('Ask the server to cancel a task (cooperative: it may still complete), then show what it observes')
    .option('--wait-ms <ms>', 'how long to watch for the task to close out after the cancel', parseWait, 5_000);
  addTaskIdArgument(command, 'a taskId (or a unique prefix), a record id or an idempotency key');
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON document: {"taskId", "acknowledged", "observed"}');
  command.action(runCancel);
}

async function runCancel(ref: string, flags: CancelFlags): Promise<void> {
  const { out, ledgerLocation, ledgerPath } = commandContext(flags);
  const session = await ClientSession.openExisting({ ledgerPath: ledgerLocation });
  if (!session) throw unknownTask(ref, ledgerPath);
  let endpoint: string | undefined;
  try {
    const record = await session.require(ref);
    endpoint = record.endpoint;
    if (!record.taskId) throw new CliError(`${ref} is not a task (${stateWord(record)}): there is nothing to cancel`);
    if (!isFollowable(record.localState)) {
      out.event({ taskId: record.taskId, acknowledged: false, alreadyClosed: true, observed: observed(record) });
      out.line(
        `task ${record.taskId} has already closed out (${paintState(stateWord(record), out.c)}): nothing to cancel`,
      );
      return;
    }
    const client = await session.client(record.endpoint);
    // follow it here when nobody else does, so this process sees what the cancel leads to
    let handle: TaskHandle | undefined;
    try {
      handle = await client.attach(record.recordId);
    } catch (error) {
      if (!(error instanceof TaskClientError && error.code === 'leased-elsewhere')) throw error;
    }
    await client.cancel(record.recordId);
    let after = (await session.ledger.get(record.recordId)) ?? record;
    if (after.localState === 'expired') {
      out.event({ taskId: record.taskId, acknowledged: false, observed: observed(after), exitCode: EXIT.expired });
      out.line(
        `${out.c.red('✘ expired')}  task ${record.taskId}: ${serverLine(after.terminalReason ?? 'the server no longer knows it')}`,
      );
      process.exitCode = EXIT.expired;
      return;
    }
    out.line(
      `${out.c.magenta('cancel requested')}  task ${record.taskId} (${record.toolName}): the server acknowledged it`,
    );
    out.line(out.c.dim('  cancellation is cooperative: the work stops when it notices, and it may still complete'));
    if (handle) {
      const timeout = new Promise<undefined>((resolve) => setTimeout(resolve, flags.waitMs, undefined).unref());
      await Promise.race([handle.outcome().catch(() => undefined), timeout]);
      if (isFollowable(handle.localState)) await handle.detach();
      after = (await session.ledger.get(record.recordId)) ?? after;
    }
    const closed = !isFollowable(after.localState);
    out.event({
      taskId: record.taskId,
      acknowledged: true,
      followedElsewhere: !handle,
      closedOut: closed,
      observed: observed(after),
    });
    const word = paintState(stateWord(after), out.c);
    if (!handle) {
      out.line(`  another process follows this task (${after.leaseHolder ?? 'unknown'}); it will see how it ends`);
    } else if (closed) {
      out.line(`  observed: ${word}${after.statusMessage ? ` · ${serverLine(after.statusMessage)}` : ''}`);
    } else {
      out.line(
        `  observed after ${formatDuration(flags.waitMs)}: ${word}, not closed out yet; \`closeout resume ${record.taskId}\` follows it to its end`,
      );
    }
  } catch (error) {
    throw explain(error, { ledgerPath, endpoint });
  } finally {
    await session.close();
  }
}

function observed(record: TaskRecord) {
  return {
    status: record.status ?? null,
    statusMessage: record.statusMessage ?? null,
    localState: record.localState,
    cancelRequestedAt: record.cancelRequestedAt === undefined ? null : new Date(record.cancelRequestedAt).toISOString(),
  };
}

function parseWait(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected a whole number of milliseconds');
  return n;
}
