/**
 * `closeout resubmit TASK_ID`: submit a closed call again, explicitly (docs/REQUIREMENTS.md S13: never automatic), and
 * follow what comes back as `call` does. The way out of `unknown-outcome`: by default the old idempotency key is sent
 * again, so a Closeout server answers with the task the lost call created instead of running the tool a second time.
 */
import { ProtocolError } from '@modelcontextprotocol/client';
import type { Command } from 'commander';

import type { ResubmitOptions } from '../../client/index.js';
import type { JsonFlags, LedgerFlags } from '../commonOptions.js';
import { addAnswerOptions, addJsonOption, addLedgerOption, addTaskIdArgument } from '../commonOptions.js';
import { commandContext, openFollowingSession } from '../context.js';
import { unknownTask } from '../session.js';
import type { AnswerFlags } from '../terminal/elicitationPrompt.js';
import { presetFrom } from '../terminal/elicitationPrompt.js';
import { explain } from '../terminal/explain.js';
import { closeOutAnswer, refused } from './call.js';

interface ResubmitFlags extends JsonFlags, LedgerFlags, AnswerFlags {
  newKey?: boolean;
  idempotencyKey?: string;
  detach?: boolean;
}

export function registerResubmit(program: Command): void {
  const command = program
    .command('resubmit')
    .description(
      'Submit a closed call again (unknown-outcome, expired, failed...) with the same tool and arguments, and follow it',
    )
    .option('--new-key', 'send with a fresh idempotency key: the tool runs again even on a Closeout server')
    .option('--idempotency-key <key>', 'send with this idempotency key')
    .option('--detach', 'print the taskId once it is in the ledger and exit 0, without following');
  addTaskIdArgument(command, 'the record to submit again: a taskId (or a unique prefix), record id or idempotency key');
  addAnswerOptions(command);
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON object per line per event, the last one the close-out');
  command.action(runResubmit);
}

async function runResubmit(ref: string, flags: ResubmitFlags): Promise<void> {
  const context = commandContext(flags);
  const { out, ledgerPath } = context;
  const opened = await openFollowingSession(context, presetFrom(flags));
  if (!opened) throw unknownTask(ref, ledgerPath);
  const { session, following } = opened;
  let endpoint: string | undefined;
  try {
    const record = await session.require(ref);
    endpoint = record.endpoint;
    // the default: the old key for unknown-outcome (the lost call's task comes back), a fresh one otherwise
    const idempotencyKey: ResubmitOptions['idempotencyKey'] = flags.newKey ? 'new' : flags.idempotencyKey;
    const client = await session.client(record.endpoint);
    following.arm();
    let answer;
    try {
      answer = await client.resubmit(record.recordId, { idempotencyKey });
    } catch (error) {
      if (error instanceof ProtocolError) return refused(out, record.endpoint, record.toolName, error);
      throw error;
    }
    await closeOutAnswer(answer, {
      out,
      following,
      url: record.endpoint,
      tool: record.toolName,
      ledgerPath,
      detach: flags.detach === true,
    });
  } catch (error) {
    throw explain(error, { ledgerPath, endpoint });
  } finally {
    following.stop();
    await session.close();
  }
}
