/**
 * `closeout resubmit TASK_ID`: submit a closed call again, explicitly (docs/REQUIREMENTS.md S13: never automatic), and
 * follow what comes back as `call` does. The way out of `unknown-outcome`: by default the old idempotency key is sent
 * again, so a Closeout server answers with the task the lost call created instead of running the tool a second time.
 */
import { ProtocolError } from '@modelcontextprotocol/client';
import type { Command } from 'commander';

import type { ResubmitOptions } from '../client/index.js';
import { displayLedgerLocation } from '../client/ledger/ledgerLocation.js';
import { closeOutAnswer, refused } from './call.js';
import type { JsonFlags, LedgerFlags } from './commonOptions.js';
import { addAnswerOptions, addJsonOption, addLedgerOption, addTaskIdArgument } from './commonOptions.js';
import type { AnswerFlags } from './elicitationPrompt.js';
import { canPrompt, elicitationHandler, presetFrom } from './elicitationPrompt.js';
import { explain } from './explain.js';
import { Follower } from './follow.js';
import { resolveLedgerPath } from './ledgerFile.js';
import { Output } from './output.js';
import { ClientSession, unknownTask } from './session.js';

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
  const preset = presetFrom(flags);
  const out = new Output({ json: flags.json });
  const ledgerLocation = resolveLedgerPath(flags.ledger);
  // what is shown of the ledger: a connection string without its password (issue 17)
  const ledgerPath = displayLedgerLocation(ledgerLocation);
  const session = await ClientSession.openExisting({
    ledgerPath: ledgerLocation,
    inputHandlers: (endpoint) => ({ elicitation: elicitationHandler(following, endpoint) }),
    onEvent: (event) => following.onClientEvent(event),
  });
  if (!session) throw unknownTask(ref, ledgerPath);
  const following = new Follower(out, (id) => session.ledger.get(id), {
    interactive: canPrompt(out),
    preset,
    now: () => session.ledger.now(),
  });
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
