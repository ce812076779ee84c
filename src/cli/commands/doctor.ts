/**
 * `closeout doctor URL`: checks a live Tasks server the way docs/REQUIREMENTS.md says to look at one (S18), one line
 * per check with pass / warn / fail and why, on the raw wire so nothing an SDK smooths over goes unseen.
 */
import type { Command } from 'commander';

import { ErrorCode, TASKS_EXTENSION_ID } from '../../protocol/index.js';
import { parseJsonObject, parseUrl } from '../arguments.js';
import { CliError } from '../cliError.js';
import { explainConnectError } from '../terminal/explain.js';
import { colorsFor } from '../terminal/output.js';
import { serverLine, terminalJson } from '../terminal/serverText.js';
import { DOCTOR_PROBE_MCP_NAME } from './doctorProbe.js';
import { rpc, type RpcResponse } from './wireProbe.js';

export type CheckStatus = 'pass' | 'warn' | 'fail' | 'skip';

export interface Check {
  name: string;
  status: CheckStatus;
  detail: string;
}

export interface DoctorOptions {
  /** The task tool to call, with `args`. Without it (nor `tryListedTools`) no tool is called. */
  tool?: string;
  /**
   * Call the listed tools in order, arguments filled from their schemas, until one answers with a task: only on a
   * server where calling its tools is harmless (a test server, a staging copy).
   */
  tryListedTools?: boolean;
  args?: Record<string, unknown>;
  token?: string;
  /** A ledger round trip: does a fresh client process resume the same task? Given by the CLI when available. */
  resumeCheck?: (url: string, taskId: string, context: ResumeCheckContext) => Promise<Check>;
}

/** What the round trip needs to record the doctor's task as a client would. */
export interface ResumeCheckContext {
  toolName: string;
  args: Record<string, unknown>;
  token?: string;
}

/** Runs every check against `url`; never throws for what the server does, only reports it. */
export async function runDoctor(url: string, options: DoctorOptions = {}): Promise<Check[]> {
  const checks: Check[] = [];
  const add = (name: string, status: CheckStatus, detail: string) => {
    checks.push({ name, status, detail });
    return status;
  };
  const auth = options.token ? { token: options.token } : {};

  let discover: RpcResponse;
  try {
    discover = await rpc(url, 'server/discover', {}, auth);
  } catch (error) {
    // the words `call` uses for the same failure ("nothing is listening at ...: start the server, or check the URL")
    add('reachable', 'fail', explainConnectError(url, error).message);
    return checks;
  }
  const extensions = (discover.result?.['capabilities'] as { extensions?: Record<string, unknown> } | undefined)
    ?.extensions;
  // a server that does not offer Tasks (a 2025-era one, or one without the extension) is not wrong: nothing here
  // applies to it, unless it hands out task handles all the same
  const undeclared = withoutTasks(discover, extensions);
  if (undeclared === undefined && (discover.error || discover.httpStatus >= 400))
    add('discover', 'fail', `server/discover answered ${describeError(discover)}`);
  else if (undeclared === undefined) add('discover', 'pass', `server/discover declares ${TASKS_EXTENSION_ID}`);

  // a tool is called only when the user named it, or asked for the listed ones to be tried: calling a tool may
  // do real work on the user's server
  const picked = options.tool
    ? {
        toolName: options.tool,
        args: options.args ?? {},
        created: await rpc(url, 'tools/call', { name: options.tool, arguments: options.args ?? {} }, auth),
      }
    : options.tryListedTools
      ? await pickTool(url, auth, add)
      : undefined;
  if (!picked && undeclared !== undefined) return notATasksServer(checks, undeclared);
  if (!picked) {
    if (!options.tool && !options.tryListedTools) {
      add(
        'task handle',
        'skip',
        'no tool was called: pass --tool NAME (and --args JSON) to check with a real task of that tool, or --try-listed-tools where calling any listed tool is harmless',
      );
    }
    for (const name of ['poll interval', 'Mcp-Name', 'capability']) add(name, 'skip', 'no task to check against');
    return checkUnknownId(url, auth, add, checks);
  }
  const { toolName, args, created } = picked;
  if (undeclared !== undefined) {
    if (created.result?.['resultType'] !== 'task') return notATasksServer(checks, undeclared);
    checks.unshift({
      name: 'discover',
      status: 'fail',
      detail: `${undeclared}, yet tools/call ${toolName} answered with a task`,
    });
  }
  const taskId = created.result?.['taskId'];
  if (created.error?.code === ErrorCode.MissingRequiredClientCapability) {
    const detail = `tools/call ${toolName} answered -32021: it needs a client capability the doctor does not declare`;
    add('task handle', 'skip', `${detail} (${created.error.message})`);
  } else if (created.error || created.httpStatus >= 400) {
    add('task handle', 'fail', `tools/call ${toolName} answered ${describeError(created)}`);
  } else if (created.result?.['resultType'] === 'input_required') {
    add('task handle', 'skip', `tools/call ${toolName} ${asksForInput(created)}; pass --tool with another task tool`);
  } else if (created.result?.['resultType'] !== 'task') {
    add('task handle', 'warn', `tools/call ${toolName} answered inline (no task); pass --tool with a task tool`);
  } else if (typeof taskId !== 'string' || taskId.length === 0) {
    add('task handle', 'fail', `tools/call ${toolName} returned resultType "task" without a taskId`);
  }

  if (typeof taskId === 'string' && taskId.length > 0) {
    const first = await rpc(url, 'tasks/get', { taskId }, auth);
    if (first.error) add('task handle', 'fail', `tasks/get right after creation answered ${describeError(first)}`);
    else if (first.result?.['taskId'] !== taskId) add('task handle', 'fail', 'tasks/get answered another taskId');
    else add('task handle', 'pass', `${toolName} returned taskId ${taskId}, and tasks/get resolves it at once`);

    const interval = created.result?.['pollIntervalMs'] ?? first.result?.['pollIntervalMs'];
    if (typeof interval !== 'number')
      add('poll interval', 'warn', 'no pollIntervalMs: clients must guess how often to poll');
    else if (interval < 100)
      add('poll interval', 'warn', `pollIntervalMs ${interval} invites clients to poll very fast`);
    else if (interval > 60_000) add('poll interval', 'warn', `pollIntervalMs ${interval} delays close-out by minutes`);
    else add('poll interval', 'pass', `pollIntervalMs ${interval}`);

    const mismatch = await rpc(
      url,
      'tasks/get',
      { taskId },
      { ...auth, headers: { 'mcp-name': DOCTOR_PROBE_MCP_NAME } },
    );
    if (mismatch.httpStatus === 400 && mismatch.error?.code === ErrorCode.HeaderMismatch)
      add('Mcp-Name', 'pass', 'tasks/get routes on Mcp-Name: a mismatch is refused with HTTP 400 / -32020');
    else if (mismatch.error)
      add('Mcp-Name', 'warn', `a mismatched Mcp-Name got ${describeError(mismatch)} instead of HTTP 400 / -32020`);
    else add('Mcp-Name', 'warn', 'a mismatched Mcp-Name header was accepted: intermediaries cannot route on it');

    const undeclared = await rpc(url, 'tasks/get', { taskId }, { ...auth, declareTasks: false });
    if (undeclared.error?.code === ErrorCode.MissingRequiredClientCapability)
      add('capability', 'pass', 'tasks/get without the extension capability is refused with -32021');
    else add('capability', 'fail', `tasks/get without the extension capability answered ${describeError(undeclared)}`);

    if (options.resumeCheck) {
      const context = { toolName, args, ...(options.token && { token: options.token }) };
      checks.push(await options.resumeCheck(url, taskId, context));
    }
    // leave nothing running on the server that the doctor started
    await rpc(url, 'tasks/cancel', { taskId }, auth).catch(() => undefined);
  } else {
    for (const name of ['poll interval', 'Mcp-Name', 'capability']) add(name, 'skip', 'no task to check against');
  }

  return checkUnknownId(url, auth, add, checks);
}

type AddCheck = (name: string, status: CheckStatus, detail: string) => CheckStatus;

async function checkUnknownId(url: string, auth: { token?: string }, add: AddCheck, checks: Check[]): Promise<Check[]> {
  const unknown = await rpc(url, 'tasks/get', { taskId: 'closeout-doctor-unknown-task' }, auth);
  if (unknown.error?.code === ErrorCode.InvalidParams)
    add('unknown id', 'pass', `an unknown taskId gets -32602 (${unknown.error.message})`);
  else add('unknown id', 'fail', `an unknown taskId answered ${describeError(unknown)} instead of -32602`);
  return checks;
}

/**
 * What an InputRequiredResult to tools/call asks for (core basic/patterns/mrtr): the doctor declares no input
 * capability and answers no MRTR round, so such a tool is skipped, never counted against the server.
 */
function asksForInput(created: RpcResponse): string {
  const requests = created.result?.['inputRequests'];
  const methods =
    requests !== null && typeof requests === 'object'
      ? [...new Set(Object.values(requests as Record<string, { method?: unknown }>).map((r) => String(r?.method)))]
          .slice(0, 3)
          .map((method) => method.slice(0, 60))
      : [];
  const what = methods.length > 0 ? ` (${methods.join(', ')})` : '';
  return `asks for input${what} before it answers, which the doctor cannot give`;
}

/** The most listed tools the doctor calls while looking for a task tool. */
const MAX_TOOLS_TRIED = 10;

interface ListedTool {
  name: string;
  inputSchema?: { properties?: Record<string, Record<string, unknown>>; required?: unknown[] };
}

/**
 * Finds a tool that answers with a task: the listed tools in order, each called with its required arguments filled
 * from its schema (default, then enum, then examples, then const). A tool whose arguments cannot be filled, or that
 * answers -32021 (a capability the doctor does not declare) or another error to the doctor's guessed arguments, is
 * SKIPped with the reason and the next one tried: none of that is the server's fault.
 */
async function pickTool(
  url: string,
  auth: { token?: string },
  add: AddCheck,
): Promise<{ toolName: string; args: Record<string, unknown>; created: RpcResponse } | undefined> {
  const listed = await rpc(url, 'tools/list', {}, auth);
  const tools = listed.result?.['tools'];
  if (listed.error || listed.httpStatus >= 400 || !Array.isArray(tools)) {
    add('task handle', 'fail', `tools/list answered ${describeError(listed)}, so there is no tool to call`);
    return undefined;
  }
  let inline: string | undefined;
  for (const tool of (tools as ListedTool[]).slice(0, MAX_TOOLS_TRIED)) {
    const filled = fillArguments(tool);
    if (typeof filled === 'string') {
      add('tool', 'skip', `${tool.name} ${filled}; trying the next tool`);
      continue;
    }
    const created = await rpc(url, 'tools/call', { name: tool.name, arguments: filled }, auth);
    if (created.error?.code === ErrorCode.MissingRequiredClientCapability) {
      const detail = `${tool.name} answered -32021: it needs a client capability the doctor does not declare`;
      add('tool', 'skip', `${detail} (${created.error.message}); trying the next tool`);
      continue;
    }
    if (created.error || created.httpStatus >= 400) {
      const detail = `${tool.name} refused the arguments ${JSON.stringify(filled)} the doctor took from its schema`;
      add('tool', 'skip', `${detail}: ${describeError(created)}; trying the next tool`);
      continue;
    }
    if (created.result?.['resultType'] === 'input_required') {
      add('tool', 'skip', `${tool.name} ${asksForInput(created)}; trying the next tool`);
      continue;
    }
    if (created.result?.['resultType'] !== 'task') {
      inline ??= tool.name;
      continue;
    }
    return { toolName: tool.name, args: filled, created };
  }
  const why =
    tools.length === 0
      ? 'the server lists no tools'
      : inline !== undefined
        ? `no listed tool answered with a task (${inline} answered inline)`
        : 'no listed tool could be called with arguments from its schema';
  add('task handle', 'warn', `${why}; pass --tool and --args to name a task tool`);
  return undefined;
}

/** The required arguments of a tool, from its schema, or why they cannot be filled. */
function fillArguments(tool: ListedTool): Record<string, unknown> | string {
  const args: Record<string, unknown> = {};
  for (const name of tool.inputSchema?.required ?? []) {
    if (typeof name !== 'string') continue;
    const property = tool.inputSchema?.properties?.[name] ?? {};
    const enumValues = property['enum'];
    const examples = property['examples'];
    const value =
      property['default'] ??
      (Array.isArray(enumValues) ? enumValues[0] : undefined) ??
      (Array.isArray(examples) ? examples[0] : undefined) ??
      property['const'];
    if (value === undefined) {
      return `needs argument ${JSON.stringify(name)}, which has no default, enum, example or const in its schema`;
    }
    args[name] = value;
  }
  return args;
}

function describeError(response: RpcResponse): string {
  if (response.httpStatus === 401) {
    return 'HTTP 401 Unauthorized: the server wants a bearer token (pass --token)';
  }
  if (response.httpStatus === 403) return 'HTTP 403 Forbidden: the server refused this token';
  const error = response.error as { code?: unknown; message?: unknown } | undefined;
  if (error) {
    const code = typeof error.code === 'number' ? String(error.code) : 'an error without a code';
    const message = typeof error.message === 'string' ? ` ${JSON.stringify(error.message)}` : '';
    return `${code}${message} (HTTP ${response.httpStatus})`;
  }
  if (response.result === undefined) return `HTTP ${response.httpStatus} with no JSON-RPC answer`;
  return `a result (HTTP ${response.httpStatus})`;
}

/**
 * Why the server does not offer Tasks, when it does not: server/discover unknown to it (a 2025-era server answers
 * HTTP 400, 404 or 405, or -32601) or answered without the extension. Undefined when it declares the extension, and
 * for answers that say something else is wrong (credentials, a server error): those are checked as failures.
 */
function withoutTasks(discover: RpcResponse, extensions: Record<string, unknown> | undefined): string | undefined {
  if (discover.httpStatus === 401 || discover.httpStatus === 403 || discover.httpStatus >= 500) return undefined;
  if (discover.error || discover.httpStatus >= 400) {
    const unknownMethod = discover.error?.code === ErrorCode.MethodNotFound;
    return unknownMethod || [400, 404, 405].includes(discover.httpStatus)
      ? `server/discover answered ${describeError(discover)}`
      : undefined;
  }
  if (extensions?.[TASKS_EXTENSION_ID] !== undefined) return undefined;
  return `server/discover does not declare ${TASKS_EXTENSION_ID} in capabilities.extensions`;
}

/** The one line for a server without Tasks: what the doctor saw, and that none of its checks applies. */
function notATasksServer(checks: Check[], why: string): Check[] {
  checks.length = 0;
  checks.push({
    name: 'discover',
    status: 'skip',
    detail: `${why}: not a server of the ${TASKS_EXTENSION_ID} extension (MCP 2026-07-28), so no check applies`,
  });
  return checks;
}

function marks(): Record<CheckStatus, string> {
  // colour only on a terminal, as every command (output.ts)
  const c = colorsFor(process.stdout);
  return { pass: c.green('PASS'), warn: c.yellow('WARN'), fail: c.red('FAIL'), skip: c.dim('SKIP') };
}

export function registerDoctor(program: Command, resumeCheck?: DoctorOptions['resumeCheck']): void {
  program
    .command('doctor')
    .description(
      'Check a live Tasks server: discovery, errors, and with a task (--tool) stable handles, poll interval, routing, resume. It calls no tool you do not name: a tool call may do real work',
    )
    .argument('<url>', 'the server’s MCP endpoint, e.g. http://127.0.0.1:3000/mcp', parseUrl)
    .option(
      '--tool <name>',
      'the task tool to call for the task checks (it runs for real; the doctor cancels it after)',
    )
    .option('--args <json>', 'arguments for --tool, as a JSON object', parseJsonObject)
    .option(
      '--try-listed-tools',
      'call the listed tools in order, arguments guessed from their schemas, until one answers with a task: only where that is harmless',
    )
    .option('--token <token>', 'bearer token for the server')
    .option('--json', 'print one JSON document')
    .action(
      async (
        url: string,
        flags: {
          tool?: string;
          args?: Record<string, unknown>;
          tryListedTools?: boolean;
          token?: string;
          json?: boolean;
        },
      ): Promise<void> => {
        if (flags.tool !== undefined && flags.tryListedTools) {
          throw new CliError('pass either --tool NAME or --try-listed-tools, not both');
        }
        const checks = await runDoctor(url, {
          ...(flags.tool !== undefined && { tool: flags.tool }),
          ...(flags.tryListedTools && { tryListedTools: true }),
          ...(flags.args !== undefined && { args: flags.args }),
          ...(flags.token !== undefined && { token: flags.token }),
          ...(resumeCheck && { resumeCheck }),
        });
        const failed = checks.some((c) => c.status === 'fail');
        // nothing checked (a server without Tasks) is no pass either: a script gets exit 1, yet no FAIL line
        const checked = checks.some((c) => c.status !== 'skip');
        const ok = !failed && checked;
        if (flags.json) {
          process.stdout.write(`${terminalJson({ url, ok, checks })}\n`);
        } else {
          const mark = marks();
          const pc = colorsFor(process.stdout);
          for (const c of checks)
            process.stdout.write(`${mark[c.status]}  ${c.name.padEnd(13)} ${serverLine(c.detail)}\n`);
          if (failed) process.stdout.write(`${pc.red('failed')}: see FAIL lines\n`);
          else if (!checked) process.stdout.write(`${pc.yellow('not checked')}: see SKIP lines\n`);
          else process.stdout.write(`${pc.green('ok')}: no check failed\n`);
        }
        if (!ok) throw new CliError('', 1);
      },
    );
}
