/**
 * `closeout call URL TOOL`: submit a tool call declaring the Tasks extension (docs/REQUIREMENTS.md S1); a plain result
 * is printed at once (S3), a task is written to the ledger before anything else (S4) and followed until it closes out,
 * then its result is printed. `--detach` stops once the handle is in the ledger.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';
import { ProtocolError } from '@modelcontextprotocol/client';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';

import type { TaskClient, TaskHandle } from '../../client/index.js';
import { isTaskHandle } from '../../client/index.js';
import { listAllTools } from '../../client/transport/listTools.js';
import type { JsonObject } from '../../protocol/index.js';
import { parseJsonObject, parseUrl } from '../arguments.js';
import { CliError } from '../cliError.js';
import type { JsonFlags, LedgerFlags, TokenFlags } from '../commonOptions.js';
import { addAnswerOptions, addJsonOption, addLedgerOption, addTokenOption } from '../commonOptions.js';
import { commandContext } from '../context.js';
import { EXIT } from '../exitCodes.js';
import { ClientSession } from '../session.js';
import { takingOver } from '../takeOver.js';
import type { AnswerFlags } from '../terminal/elicitationPrompt.js';
import { canPrompt, elicitationHandler, presetFrom } from '../terminal/elicitationPrompt.js';
import { explain } from '../terminal/explain.js';
import { Follower } from '../terminal/follow.js';
import type { Output } from '../terminal/output.js';
import { resultLines } from '../terminal/recordView.js';
import { serverLine } from '../terminal/serverText.js';

interface CallFlags extends JsonFlags, LedgerFlags, TokenFlags, AnswerFlags {
  args?: Record<string, unknown>;
  arg?: Record<string, unknown>;
  correlationId?: string;
  idempotencyKey?: string;
  detach?: boolean;
}

export function registerCall(program: Command): void {
  const command = program
    .command('call')
    .description('Call a tool: print a plain result at once, or follow the task it creates until it closes out')
    .argument('<url>', 'the server’s MCP endpoint, e.g. http://127.0.0.1:3000/mcp', parseUrl)
    .argument('[tool]', 'the tool to call (without it: the tools the server offers, as `closeout tools` lists them)')
    .option('--args <json>', 'the arguments, as a JSON object', parseJsonObject)
    .option('--arg <key=value>', 'one argument (repeatable; the value is read as JSON when it is JSON)', collectArg)
    .option('--correlation-id <id>', 'your business id for this call, kept in the ledger')
    .option(
      '--idempotency-key <key>',
      'send at most once per key: calling again with it (same tool and arguments) returns the same task, also after a lost answer',
    )
    .option('--detach', 'print the taskId once it is in the ledger and exit 0, without following');
  addAnswerOptions(command);
  addTokenOption(command);
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON object per line per event, the last one the close-out');
  command.action(runCall);
}

async function runCall(url: string, tool: string | undefined, flags: CallFlags): Promise<void> {
  if (tool === undefined) {
    const { printTools } = await import('./tools.js');
    return printTools(url, flags);
  }
  const args = { ...flags.args, ...flags.arg } as JsonObject;
  const preset = presetFrom(flags);
  const { out, ledgerLocation, ledgerPath } = commandContext(flags);
  // the handlers are wired when the client connects, after `following` exists
  const session = ClientSession.open({
    ledgerPath: ledgerLocation,
    token: flags.token,
    namedServer: url,
    inputHandlers: (endpoint) => ({ elicitation: elicitationHandler(following, endpoint) }),
    onEvent: (event) => following.onClientEvent(event),
  });
  const following = new Follower(out, (id) => session.ledger.get(id), {
    interactive: canPrompt(out),
    preset,
    now: () => session.ledger.now(),
  });
  try {
    const client = await session.client(url);
    await assertToolExists(client, url, tool);
    following.arm();
    let answer: CallToolResult | Awaited<ReturnType<TaskClient['callTool']>>;
    try {
      // a known key whose record another process holds on a lapsed lease is waited for, then taken over
      answer = await takingOver(out, session.ledger, client, () =>
        client.callTool(tool, args, { correlationId: flags.correlationId, idempotencyKey: flags.idempotencyKey }),
      );
    } catch (error) {
      if (error instanceof ProtocolError) return refused(out, url, tool, error);
      throw explain(error, { ledgerPath, endpoint: url });
    }
    await closeOutAnswer(answer, { out, following, url, tool, ledgerPath, detach: flags.detach === true });
  } catch (error) {
    throw explain(error, { ledgerPath, endpoint: url });
  } finally {
    following.stop();
    await session.close();
  }
}

/** What `call` (and `resubmit`) do with the answer: print a plain result, or detach, or follow the task to its end. */
export async function closeOutAnswer(
  answer: CallToolResult | TaskHandle,
  context: { out: Output; following: Follower; url: string; tool: string; ledgerPath: string; detach: boolean },
): Promise<void> {
  const { out, following, url, tool, ledgerPath, detach } = context;
  if (!isTaskHandle(answer)) return printResult(out, url, tool, answer);
  if (detach || following.wasInterrupted) {
    await answer.detach();
    out.event({
      event: 'closeout',
      taskId: answer.taskId,
      recordId: answer.recordId,
      tool,
      endpoint: url,
      outcome: 'detached',
      detachReason: detach ? 'requested' : 'interrupted',
      status: answer.status ?? null,
      exitCode: detach ? EXIT.ok : EXIT.interrupted,
    });
    if (!out.json) process.stdout.write(`${answer.taskId}\n`);
    out.aside(
      out.ce.dim(
        `task ${answer.taskId} (${answer.status ?? 'submitted'}) is in the ledger ${ledgerPath}; follow it with \`closeout resume ${answer.taskId}\``,
      ),
    );
    process.exitCode = detach ? EXIT.ok : EXIT.interrupted;
    return;
  }
  following.follow(answer, url, 'submitted');
  const [closeOut] = await following.done();
  process.exitCode = closeOut?.exitCode ?? EXIT.ok;
}

/** An unknown tool is bad input: say so before anything is recorded or sent (the ledger stays as it was). */
async function assertToolExists(client: TaskClient, url: string, tool: string): Promise<void> {
  // a server that does not advertise tools (the SDK then answers an empty list) gets the call as it is
  if (client.client.getServerCapabilities()?.tools === undefined) return;
  let names: string[];
  try {
    names = (await listAllTools(client.client)).map((t) => t.name);
  } catch {
    return; // a server that does not list its tools gets the call as it is
  }
  if (!names.includes(tool)) {
    const listed = names.length > 0 ? names.map((n) => serverLine(n)).join(', ') : 'none';
    throw new CliError(`${url} has no tool "${tool}": pick one of ${listed}`);
  }
}

function printResult(out: Output, url: string, tool: string, result: CallToolResult): void {
  const exitCode = result.isError === true ? EXIT.failed : EXIT.ok;
  out.event({
    event: 'closeout',
    taskId: null,
    tool,
    endpoint: url,
    outcome: 'completed',
    task: false,
    exitCode,
    result,
  });
  const c = out.c;
  out.line(
    `${result.isError === true ? c.red('✘ tool error') : c.green('✔ result')}  ${tool} ${c.dim('(no task: the server answered at once)')}`,
  );
  for (const line of resultLines(result, c)) out.line(line);
  process.exitCode = exitCode;
}

export function refused(out: Output, url: string, tool: string, error: ProtocolError): void {
  out.event({
    event: 'closeout',
    taskId: null,
    tool,
    endpoint: url,
    outcome: 'refused',
    exitCode: EXIT.failed,
    error: { code: error.code, message: error.message, ...(error.data !== undefined && { data: error.data }) },
  });
  out.line(`${out.c.red('✘ refused')}  ${tool}: the server answered ${error.code} ${serverLine(error.message)}`);
  process.exitCode = EXIT.failed;
}

function collectArg(value: string, previous: Record<string, unknown> | undefined): Record<string, unknown> {
  const at = value.indexOf('=');
  if (at <= 0) throw new InvalidArgumentError('expected key=value, e.g. --arg items=3');
  const raw = value.slice(at + 1);
  let parsed: unknown = raw;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // not JSON: the text itself
  }
  return { ...(previous ?? {}), [value.slice(0, at)]: parsed };
}
