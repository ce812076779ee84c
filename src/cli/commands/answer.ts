/**
 * `closeout answer TASK_ID`: answer the input requests a task is waiting for (docs/REQUIREMENTS.md S9), then exit; the
 * task keeps running, detached, for `closeout resume` (or whoever follows it) to close out. Each answer is stored in
 * the ledger before `tasks/update` carries it, so it is never asked twice.
 */
import type { Command } from 'commander';

import type { TaskHandle, TaskInputContext } from '../../client/index.js';
import { isFollowable } from '../../client/ledger/index.js';
import { CliError } from '../cliError.js';
import type { JsonFlags, LedgerFlags } from '../commonOptions.js';
import { addAnswerOptions, addJsonOption, addLedgerOption, addTaskIdArgument } from '../commonOptions.js';
import { commandContext } from '../context.js';
import { EXIT } from '../exitCodes.js';
import { ClientSession, unknownTask } from '../session.js';
import { takingOver } from '../takeOver.js';
import type { AnswerFlags, InputHost } from '../terminal/elicitationPrompt.js';
import { canPrompt, elicitationHandler, presetFrom, promptQueue, showAnswered } from '../terminal/elicitationPrompt.js';
import { explain } from '../terminal/explain.js';
import { Output } from '../terminal/output.js';
import { paintState, stateWord } from '../terminal/recordView.js';
import { serverLine } from '../terminal/serverText.js';

type AnswerCommandFlags = JsonFlags & LedgerFlags & AnswerFlags;

export function registerAnswer(program: Command): void {
  const command = program
    .command('answer')
    .description('Answer the input requests a task is waiting for, then exit (the task keeps running)');
  addTaskIdArgument(command, 'a taskId (or a unique prefix), a record id or an idempotency key');
  addAnswerOptions(command);
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON document: {"taskId", "status", "answered": [...]}');
  command.action(runAnswer);
}

async function runAnswer(ref: string, flags: AnswerCommandFlags): Promise<void> {
  const preset = presetFrom(flags);
  const { out, ledgerLocation, ledgerPath } = commandContext(flags);
  const interactive = canPrompt(out);
  if (!preset && !interactive) {
    throw new CliError(
      'stdin is not a terminal: pass --accept JSON, --decline or --dismiss to answer without a prompt',
    );
  }
  // flags go to stdout as the events of this command; nothing else is followed here
  const quiet = new Output({ json: true }, devNull(), process.stderr);
  const asked: Promise<unknown>[] = [];
  let unanswerable: string | undefined;
  let interrupted = false;
  const host: InputHost = {
    out: flags.json ? quiet : out,
    preset,
    interactive,
    exclusive: promptQueue(),
    interrupt: () => {
      interrupted = true;
      void handle?.detach();
    },
    needsInput: (_recordId, why) => {
      unanswerable = why;
      void handle?.detach();
    },
    answered: (context: TaskInputContext, result, how) => showAnswered(flags.json ? quiet : out, context, result, how),
  };
  const session = await ClientSession.openExisting({
    ledgerPath: ledgerLocation,
    inputHandlers: (endpoint) => {
      const ask = elicitationHandler(host, endpoint);
      return {
        elicitation: (request, context) => {
          const answer = Promise.resolve(ask(request, context));
          asked.push(answer.catch(() => undefined));
          return answer;
        },
      };
    },
  });
  if (!session) throw unknownTask(ref, ledgerPath);
  let handle: TaskHandle | undefined;
  let endpoint: string | undefined;
  try {
    const record = await session.require(ref);
    endpoint = record.endpoint;
    if (!record.taskId) throw new CliError(`${ref} is not a task (${stateWord(record)}): there is nothing to answer`);
    if (!isFollowable(record.localState)) {
      out.event({ taskId: record.taskId, status: record.status ?? null, localState: record.localState, answered: [] });
      out.line(`task ${record.taskId} has already closed out (${stateWord(record)}): there is nothing to answer`);
      return;
    }
    const client = await session.client(record.endpoint);
    const started = Date.now();
    // a holder on a lapsed lease is waited for (its events would break the one JSON document: on stderr only)
    handle = await takingOver(flags.json ? quiet : out, session.ledger, client, () => client.attach(record.recordId));
    // one tasks/get now: its inputRequests go to the handler, which asks (or takes the flags)
    const observed = await client.refresh(record.recordId);
    await settle();
    while (asked.length > 0) {
      const pending = asked.splice(0);
      await Promise.all(pending);
      await settle();
    }
    if (isFollowable(handle.localState)) await handle.detach();
    await session.closeClients(); // waits until every stored answer has been sent (or failed)
    const after = (await session.ledger.get(record.recordId)) ?? observed;
    const answered = after.inputs
      .filter((input) => input.answeredAt !== undefined && input.answeredAt >= started)
      .map((input) => ({
        key: input.key,
        action: (input.response?.['action'] as string | undefined) ?? null,
        sent: input.sentAt !== undefined && input.sentAt >= started,
      }));
    const failed = after.lastError !== undefined && after.lastError.at >= started ? after.lastError.message : undefined;
    const exitCode = interrupted
      ? EXIT.interrupted
      : unanswerable || (failed && answered.length === 0)
        ? EXIT.usage
        : EXIT.ok;
    out.event({
      taskId: record.taskId,
      status: after.status ?? null,
      localState: after.localState,
      answered,
      ...(unanswerable && { notAnswered: unanswerable }),
      ...(failed && { lastError: failed }),
      exitCode,
    });
    const c = out.c;
    if (observed.status !== 'input_required' && answered.length === 0) {
      out.line(`task ${record.taskId} is ${paintState(stateWord(observed), c)}: it asks for no input now`);
    }
    for (const a of answered) {
      out.line(
        `${a.sent ? c.green('✔ sent') : c.yellow('✔ stored, not sent yet')} ${serverLine(a.key)}: ${a.action ?? '?'}${a.sent ? '' : c.dim(' (the next follower sends it)')}`,
      );
    }
    if (unanswerable) out.aside(`closeout: not answered: ${unanswerable}`);
    if (failed) out.aside(`closeout: ${serverLine(failed)}`);
    if (answered.length > 0) {
      // the status the ledger holds is from before the answer (input_required): saying it reads as if the answer
      // was not taken, so say what happened to the answer and what follows the task now
      const resume = `\`closeout resume ${record.taskId}\``;
      out.line(
        c.dim(
          answered.every((a) => a.sent)
            ? `the server has the answer (recorded in the ledger too); ${resume} follows task ${record.taskId} to its end`
            : `the answer is recorded in the ledger, not sent yet; ${resume} sends it and follows task ${record.taskId} to its end`,
        ),
      );
    }
    process.exitCode = exitCode;
  } catch (error) {
    throw explain(error, { ledgerPath, endpoint });
  } finally {
    await session.close();
  }
}

/** Let handlers the last poll started reach their first await. */
async function settle(): Promise<void> {
  for (let i = 0; i < 3; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

function devNull(): NodeJS.WriteStream {
  return { write: () => true, isTTY: false } as unknown as NodeJS.WriteStream;
}
