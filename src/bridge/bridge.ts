/**
 * `closeout bridge`: a stdio MCP server for hosts that do not speak the Tasks extension (they call a tool and wait,
 * and a long tool dies at their timeout). It offers the upstream server's tools and calls them through the client
 * half, declaring the extension, so every handle is in a durable ledger before anything else happens with it:
 *
 * - a call that ends within `waitMs` answers the host with the tool's result, as if the tool were synchronous;
 *   meanwhile each status message goes to the host as `notifications/progress` when its request carried a
 *   `progressToken`;
 * - a call still running then answers with a short text naming the task, and four tools of the bridge's own
 *   (`closeout_tasks`, `closeout_wait`, `closeout_answer`, `closeout_cancel`) get at it later, from this process or
 *   the next one (the ledger keeps every task; on start the bridge resumes the open ones);
 * - input the task asks for goes to the host as it can take it (hostInput.ts): its own `elicitation/create` for a
 *   2025 host that declared elicitation, an `input_required` result for a 2026-07-28 one, else a text with the
 *   question and how to answer it with `closeout_answer`; each question is answered once (the client half stores
 *   each answer before sending it);
 * - a host that retries a call (same tool, same arguments, within `dedupeWindowMs`) gets the same task back: the
 *   idempotency key is derived from the call.
 */
import { createHash } from 'node:crypto';

import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import type { InputRequiredResult } from '@modelcontextprotocol/server';
import { isInputRequiredResult, McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';

import { openLedgerLocation } from '../client/connect.js';
import type { ConnectTaskClientOptions, TaskClient, TaskHandle, TaskRecord } from '../client/index.js';
import { connectHttpTaskClient, connectStdioTaskClient, isTaskHandle, TaskClientError } from '../client/index.js';
import { displayLedgerLocation } from '../client/ledger/ledgerLocation.js';
import { listAllTools } from '../client/transport/listTools.js';
import { classifyTransportError } from '../client/transport/transportFailure.js';
import { canonicalJson } from '../protocol/canonicalJson.js';
import type { JsonObject } from '../protocol/index.js';
import { stdioServerTransport } from '../server/stdio.js';
import type { ElicitParams, HostCall } from './hostInput.js';
import { answersOf, hostAsking, HostInput, inputRequiredResult } from './hostInput.js';

export interface BridgeOptions {
  /**
   * The upstream MCP server: its Streamable HTTP endpoint, or the command of a stdio server, which the bridge starts
   * (and starts again when it exits) with its stderr on the bridge's.
   */
  upstream: string | StdioUpstream;
  /** The ledger: a SQLite file path or a `postgres://` URL. */
  ledger: string;
  /** How long a call waits for its task before it answers with the task's id. Default 55 s. */
  waitMs?: number;
  /** Calls of one tool with the same arguments within this long are one task. 0 turns it off. Default 10 minutes. */
  dedupeWindowMs?: number;
  /** A bearer token for the upstream server. */
  token?: string | undefined;
  stdin?: NodeJS.ReadableStream;
  stdout?: NodeJS.WritableStream;
  /** Where the bridge reports (never stdout). Default stderr. */
  log?: (line: string) => void;
}

/** A stdio server the bridge starts as its upstream. */
export interface StdioUpstream {
  command: string;
  args?: string[];
  /** Its environment; default the bridge's own. */
  env?: Record<string, string>;
  cwd?: string;
}

export interface RunningBridge {
  client: TaskClient;
  /** Resolves when the connection is over: the host closed stdin, or stdout broke. */
  closed: Promise<void>;
  close(): Promise<void>;
}

export const DEFAULT_BRIDGE_WAIT_MS = 55_000;
export const DEFAULT_DEDUPE_WINDOW_MS = 10 * 60_000;
/** The longest `closeout_wait` waits in one call (hosts time out calls at about a minute). */
const MAX_WAIT_SECONDS = 50;

const OWN_TOOLS: Tool[] = [
  {
    name: 'closeout_tasks',
    description: "This bridge's tasks, open ones first: task id, tool, status and status message.",
    inputSchema: { type: 'object', properties: {} },
  },
  {
    name: 'closeout_wait',
    description: 'Wait up to `seconds` for a task, then return its result, or its status if it is still running.',
    inputSchema: {
      type: 'object',
      properties: {
        taskId: { type: 'string', description: 'the task id a call answered with' },
        seconds: { type: 'number', description: `how long to wait, at most ${MAX_WAIT_SECONDS} (default 30)` },
      },
      required: ['taskId'],
    },
  },
  {
    name: 'closeout_answer',
    description: 'Answer the input a task asks for (key as the task stated it).',
    inputSchema: {
      type: 'object',
      properties: {
        taskId: { type: 'string' },
        key: { type: 'string', description: 'the input request key' },
        response: {
          type: 'object',
          description:
            'an elicitation answer: {"action":"accept","content":{...}}, {"action":"decline"} or {"action":"cancel"}',
        },
      },
      required: ['taskId', 'key', 'response'],
    },
  },
  {
    name: 'closeout_cancel',
    description: 'Ask the upstream server to cancel a task (cooperative: it may still complete).',
    inputSchema: { type: 'object', properties: { taskId: { type: 'string' } }, required: ['taskId'] },
  },
];

/** Serves the bridge on stdio until the host closes it. */
export async function startBridge(options: BridgeOptions): Promise<RunningBridge> {
  const log = options.log ?? ((line: string) => process.stderr.write(`closeout bridge: ${line}\n`));
  const waitMs = options.waitMs ?? DEFAULT_BRIDGE_WAIT_MS;
  const dedupeWindowMs = options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS;
  const hostInput = new HostInput();

  // opened before the upstream is reached, so that a ledger that cannot be used is not reported as the upstream's fault
  const ledger = await openLedgerLocation(options.ledger).catch((error: unknown) => {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`the bridge's ledger ${displayLedgerLocation(options.ledger)} cannot be opened: ${reason}`, {
      cause: error,
    });
  });
  const connectOptions: ConnectTaskClientOptions = {
    ledger,
    inputHandlers: {
      elicitation: (request, context) => hostInput.ask(request.params as ElicitParams, context),
    },
    onEvent: (event) => {
      if (event.type === 'error') log(`record ${event.recordId}: ${event.error.message}`);
    },
  };
  const upstream = options.upstream;
  const connecting =
    typeof upstream === 'string'
      ? connectHttpTaskClient(upstream, {
          ...connectOptions,
          ...(options.token ? { requestInit: { headers: { authorization: `Bearer ${options.token}` } } } : {}),
        })
      : connectStdioTaskClient(
          // the upstream's stderr is the bridge's (the host's log); its stdout is the bridge's to read
          { ...upstream, env: upstream.env ?? stringEnvironment(), stderr: 'inherit' },
          connectOptions,
        ).catch((error: unknown) => {
          const command = [upstream.command, ...(upstream.args ?? [])].join(' ');
          const reason = error instanceof Error ? error.message : String(error);
          throw new Error(`the upstream server \`${command}\` could not be started: ${reason}`, { cause: error });
        });
  // the client is handed the ledger, not its location: the bridge disposes of it
  const client = await connecting.catch(async (error: unknown) => {
    await ledger.dispose();
    throw error;
  });
  // the tasks an earlier bridge process left open are followed again (the upstream may still be down: they are
  // followed once it answers)
  void client
    .resumeAll()
    .then(({ resumed }) => resumed.length > 0 && log(`resumed ${resumed.length} open task(s)`))
    .catch((error: unknown) => log(`resume failed: ${error instanceof Error ? error.message : String(error)}`));

  /** The output schemas of the upstream's tools as last listed: a host's revision may shape results by them. */
  const outputSchemas = new Map<string, Record<string, unknown>>();
  const { transport, closed } = stdioServerTransport(options.stdin, options.stdout);
  const handle = serveStdio(
    () => {
      const mcp = new McpServer({ name: 'closeout-bridge', version: '0.1.0' });
      mcp.server.registerCapabilities({ tools: {} });
      mcp.server.setRequestHandler('tools/list', async () => ({ tools: [...(await upstreamTools()), ...OWN_TOOLS] }));
      mcp.server.setRequestHandler('tools/call', async (request, ctx) => {
        const { name, arguments: args = {} } = request.params;
        const call: HostCall = { ctx, asking: hostAsking(ctx, mcp.server.getClientCapabilities()) };
        const result = await dispatch(name, args, call);
        if (isInputRequiredResult(result)) return result;
        // through the codec of the host's revision, as the SDK's own tools/call handler does (for a 2025 host,
        // structured content that is no object, or of a non-object schema, is wrapped)
        return mcp.server.projectCallToolResult(result, outputSchemas.get(name));
      });
      return mcp;
    },
    { transport, onerror: (error) => log(error.message) },
  );

  /** A host's `tools/call`: one of the bridge's own tools, or an upstream tool; a failure is a tool error. */
  async function dispatch(
    name: string,
    args: Record<string, unknown>,
    hostCall: HostCall,
  ): Promise<CallToolResult | InputRequiredResult> {
    try {
      // a 2026-07-28 host calling again with the answers an input_required result asked for
      const answers = answersOf(hostCall.ctx);
      if (answers) {
        for (const [key, response] of Object.entries(answers.responses)) await answer(answers.taskId, key, response);
        const forMs = name === 'closeout_wait' ? waitSeconds(args['seconds']) * 1000 : waitMs;
        return await waitFor(answers.taskId, forMs, hostCall);
      }
      switch (name) {
        case 'closeout_tasks':
          return await listTasks();
        case 'closeout_wait':
          return await waitFor(String(args['taskId'] ?? ''), waitSeconds(args['seconds']) * 1000, hostCall);
        case 'closeout_answer':
          return await answer(String(args['taskId'] ?? ''), String(args['key'] ?? ''), args['response']);
        case 'closeout_cancel':
          await client.cancel(String(args['taskId'] ?? ''));
          return text(
            `cancel requested for task ${String(args['taskId'])}: the server acknowledged it (it may still complete)`,
          );
        default:
          return await call(name, args as JsonObject, hostCall);
      }
    } catch (error) {
      return toolError(error);
    }
  }

  async function upstreamTools(): Promise<Tool[]> {
    try {
      const tools = await listAllTools(client.client);
      outputSchemas.clear();
      for (const tool of tools) if (tool.outputSchema) outputSchemas.set(tool.name, tool.outputSchema);
      return tools;
    } catch (error) {
      log(`the upstream server's tools could not be listed: ${error instanceof Error ? error.message : String(error)}`);
      return [];
    }
  }

  /** A call of an upstream tool: its result within `waitMs`, else a text naming its task. */
  async function call(name: string, args: JsonObject, hostCall: HostCall) {
    const idempotencyKey = dedupeWindowMs > 0 ? await keyFor(name, args) : undefined;
    const answer = await client.callTool(name, args, {
      ...(idempotencyKey && { idempotencyKey, correlationId: callIdentity(name, args) }),
    });
    if (!isTaskHandle(answer)) return withoutResultType(answer);
    return follow(answer, hostCall, waitMs);
  }

  /**
   * The idempotency key of a call: the same tool and arguments within the window are one task. Calls carry the call's
   * identity as their correlation id, and the latest record with it says whether it is recent enough to reuse.
   */
  async function keyFor(name: string, args: JsonObject): Promise<string> {
    const identity = callIdentity(name, args);
    const [latest] = (await client.list({ correlationId: identity })).sort((a, b) => b.submittedAt - a.submittedAt);
    const open = latest && !['terminal', 'expired', 'unknown-outcome'].includes(latest.localState);
    if (latest?.idempotencyKey && (open || Date.now() - latest.submittedAt < dedupeWindowMs)) {
      return latest.idempotencyKey;
    }
    return `${identity}:${Date.now()}`;
  }

  /**
   * Follow a task for a call of the host, for up to `forMs`: its result, or its question as the host can be asked it,
   * or a text saying it goes on.
   */
  async function follow(handle: TaskHandle, hostCall: HostCall, forMs: number) {
    const { ctx } = hostCall;
    const stopFollowing = hostInput.follow(await handle.record(), hostCall);
    const progressToken = ctx.mcpReq._meta?.progressToken;
    let progress = 0;
    const stopProgress = handle.onChange((record) => {
      if (progressToken === undefined || record.statusMessage === undefined) return;
      progress += 1;
      void ctx.mcpReq
        .notify({
          method: 'notifications/progress',
          params: { progressToken, progress, message: record.statusMessage },
        })
        .catch(() => undefined);
    });
    // input nobody is asking the host for: said at once, not at the end of the wait
    const input = hostInput.needsInput(handle);
    try {
      let timer: NodeJS.Timeout | undefined;
      const ended = await Promise.race([
        handle.outcome(),
        input.found,
        new Promise<'waiting'>((resolve) => (timer = setTimeout(() => resolve('waiting'), forMs))),
      ]);
      clearTimeout(timer);
      if (ended === 'waiting') return stillRunning(await handle.record(), 'running');
      if (!('inputs' in ended)) return outcomeResult(ended.record);
      return hostCall.asking === 'result' ? inputRequiredResult(ended) : stillRunning(ended, 'input');
    } finally {
      input.stop();
      stopProgress();
      stopFollowing();
    }
  }

  async function waitFor(taskId: string, forMs: number, hostCall: HostCall) {
    const record = await client.get(taskId);
    if (!record) throw new TaskClientError('not-found', `this bridge has no task ${taskId}: closeout_tasks lists them`);
    if (isClosed(record)) return outcomeResult(record);
    const handle = await client.attach(taskId);
    return follow(handle, hostCall, forMs);
  }

  async function answer(taskId: string, key: string, response: unknown) {
    if (typeof response !== 'object' || response === null || Array.isArray(response)) {
      throw new TaskClientError(
        'invalid-argument',
        'response must be an object such as {"action":"accept","content":{...}}',
      );
    }
    await client.answer(taskId, key, response as JsonObject);
    hostInput.answered(taskId, key);
    return text(`answer to ${key} stored and sent for task ${taskId}: closeout_wait returns its result`);
  }

  async function listTasks() {
    const records = await client.list({});
    records.sort((a, b) => Number(isClosed(a)) - Number(isClosed(b)) || b.submittedAt - a.submittedAt);
    if (records.length === 0) return text('no tasks yet');
    return text(
      records
        .slice(0, 100)
        .map(
          (r) =>
            `${r.taskId ?? r.recordId}  ${r.toolName}  ${r.status ?? r.localState}${r.statusMessage ? ` · ${r.statusMessage}` : ''}`,
        )
        .join('\n'),
    );
  }

  return {
    client,
    closed,
    close: async () => {
      await handle.close();
      await client.close();
      await ledger.dispose();
    },
  };
}

function callIdentity(name: string, args: JsonObject): string {
  return `bridge:${createHash('sha256').update(canonicalJson({ name, args })).digest('base64url').slice(0, 32)}`;
}

/** The seconds of a `closeout_wait`: 30 by default, at most MAX_WAIT_SECONDS. */
function waitSeconds(value: unknown): number {
  const seconds = Number(value ?? 30);
  return Math.min(Math.max(Number.isFinite(seconds) ? seconds : 30, 0), MAX_WAIT_SECONDS);
}

function isClosed(record: TaskRecord): boolean {
  return record.localState === 'terminal' || record.localState === 'expired' || record.localState === 'unknown-outcome';
}

function stillRunning(record: TaskRecord, why: 'running' | 'input'): CallToolResult {
  const id = record.taskId ?? record.recordId;
  if (why === 'input') {
    const open = record.inputs.filter((input) => input.response === undefined);
    const questions = open.map((input) => {
      const params = input.request.params as ElicitParams;
      return `- key "${input.key}": ${params.message ?? '(no message)'}\n  schema: ${JSON.stringify(params.requestedSchema ?? {})}`;
    });
    return text(
      `Task ${id} (${record.toolName}) needs input before it can go on:\n${questions.join('\n')}\n` +
        `Answer with closeout_answer {"taskId":"${id}","key":KEY,"response":{"action":"accept","content":{...}}} ` +
        `(or {"action":"decline"}), then closeout_wait {"taskId":"${id}"} for its result.`,
    );
  }
  return text(
    `Task ${id} (${record.toolName}) is still ${record.status ?? 'starting'}${record.statusMessage ? ` (${record.statusMessage})` : ''}. ` +
      `It goes on; get its result with closeout_wait {"taskId":"${id}"}.`,
  );
}

/** What the host gets for a closed task: its result, or an error result saying how it ended. */
function outcomeResult(record: TaskRecord): CallToolResult {
  const id = record.taskId ?? record.recordId;
  if (record.result) return withoutResultType(record.result as CallToolResult);
  if (record.error) {
    return errorText(`Task ${id} (${record.toolName}) failed: ${record.error.message} (JSON-RPC ${record.error.code})`);
  }
  if (record.status === 'cancelled') return errorText(`Task ${id} (${record.toolName}) was cancelled`);
  return errorText(
    `Task ${id} (${record.toolName}) ended without a result: ${record.terminalReason ?? record.localState}`,
  );
}

/**
 * The upstream's result without 2026-07-28's `resultType` (a task's stored result carries it): a 2025 host must not
 * see it, and the SDK stamps it again for a 2026-07-28 host.
 */
function withoutResultType(result: CallToolResult): CallToolResult {
  const { resultType: _resultType, ...rest } = result as CallToolResult & { resultType?: unknown };
  return rest;
}

function toolError(error: unknown): CallToolResult {
  if (error instanceof TaskClientError && error.code === 'unreachable') {
    return errorText(`The upstream server cannot be reached: ${error.message}`);
  }
  // a refused connection sent nothing, though the client half counts a call that failed so among unknown outcomes
  const failure = error instanceof TaskClientError ? classifyTransportError(error.cause) : undefined;
  if (failure?.kind === 'refused') {
    return errorText(`The upstream server cannot be reached (${failure.message}): nothing was sent; call again later`);
  }
  return errorText(error instanceof Error ? error.message : String(error));
}

function text(value: string): CallToolResult {
  return { content: [{ type: 'text', text: value }] };
}

function errorText(value: string): CallToolResult {
  return { content: [{ type: 'text', text: value }], isError: true };
}

/** This process's environment without unset entries, as a spawned server's. */
function stringEnvironment(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}
