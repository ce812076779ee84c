/**
 * The one module that reaches into the SDK (2.4.x) on the server side. The SDK has no Tasks support, and its
 * `tools/call` wrapper validates every result as a CallToolResult, so a CreateTaskResult cannot come out of an
 * ordinary tool callback. We register task tools as ordinary tools (so `tools/list` shows them and the inline path
 * is the SDK's own), then put a dispatcher in front of the stored `tools/call` handler that answers the task path
 * itself. test/server/sdkGlue.test.ts fails loudly if an SDK upgrade moves what this relies on.
 */
import type { AuthInfo, McpServer, ServerContext } from '@modelcontextprotocol/server';
import { MissingRequiredClientCapabilityError, ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import type { Span } from '@opentelemetry/api';
import * as z from 'zod/v4';

import type { DetailedTask, GetTaskParams, InputResponse, JsonObject } from '../protocol/index.js';
import {
  CancelTaskParamsSchema,
  CLIENT_CAPABILITIES_META_KEY,
  EmptyResultSchema,
  GetTaskParamsSchema,
  GetTaskResultSchema,
  IDEMPOTENCY_KEY_META_KEY,
  InputResponsesSchema,
  requiredTasksCapabilityData,
  TASK_METHODS,
  TASKS_EXTENSION_ID,
  UpdateTaskParamsSchema,
} from '../protocol/index.js';
import { storable } from '../protocol/storableText.js';
import { inputCapabilitiesOf } from './inputCapabilities.js';
import type { TaskServer } from './taskServer.js';
import type { RegisteredTaskTool } from './taskServerOptions.js';
import { ATTR, carrierOfSpan } from './telemetry.js';

/** Resolves the caller's principal for a request; tasks are bound to it. */
export type PrincipalResolver = (request: { authInfo: AuthInfo | undefined }) => string;

/** Default principal: the token's subject or client id; `anonymous` without auth (the taskId is then the secret). */
export const defaultPrincipal: PrincipalResolver = ({ authInfo }) => {
  if (!authInfo) return 'anonymous';
  const sub = authInfo.extra?.['sub'];
  return typeof sub === 'string' && sub.length > 0 ? `sub:${sub}` : `client:${authInfo.clientId}`;
};

/** The input schema of a task tool that declares none, made once: a zod object costs tens of µs to build per request. */
const AnyArgumentsSchema = z.looseObject({});

export interface AttachOptions {
  principal?: PrincipalResolver;
}

type StoredHandler = (request: { method: string; params?: Record<string, unknown> }, ctx: ServerContext) => unknown;

interface ProtocolInternals {
  _requestHandlers: Map<string, StoredHandler>;
}

/**
 * Adds the Tasks extension to one (per-request) McpServer: declares the extension, registers the task tools, routes
 * their `tools/call` by task policy, and serves `tasks/get`, `tasks/update` and `tasks/cancel`.
 * Call it in the factory given to `createMcpHandler`, before the server is connected.
 */
export function attachTasks(mcp: McpServer, tasks: TaskServer, options: AttachOptions = {}): void {
  const principalOf = options.principal ?? defaultPrincipal;
  const principal = (ctx: ServerContext) => principalOf({ authInfo: ctx.http?.authInfo });

  mcp.server.registerCapabilities({ extensions: { [TASKS_EXTENSION_ID]: {} } });

  for (const tool of tasks.registeredTools()) {
    const { config } = tool;
    mcp.registerTool(
      tool.name,
      {
        ...(config.title !== undefined && { title: config.title }),
        ...(config.description !== undefined && { description: config.description }),
        // always a schema: without one the SDK calls the callback with the context alone and drops the arguments
        inputSchema: config.inputSchema ?? AnyArgumentsSchema,
        ...(config.annotations !== undefined && { annotations: config.annotations }),
      },
      // the inline path: policy `never`, or `optional` toward a request that did not declare the extension
      (async (args: JsonObject | undefined, ctx: ServerContext) =>
        tasks.runInline(tool, args ?? {}, principal(ctx), ctx.mcpReq.signal)) as never,
    );
  }

  const internals = mcp.server as unknown as ProtocolInternals;
  const sdkToolsCall = internals._requestHandlers.get('tools/call');
  // no tools at all (neither task tools nor the author's): the SDK answers tools/call itself
  if (sdkToolsCall === undefined && tasks.registeredTools().length === 0) {
    registerTaskMethods(mcp, tasks, principal);
    return;
  }
  if (typeof sdkToolsCall !== 'function') {
    throw new Error('closeout: the SDK no longer stores a tools/call handler where sdkGlue expects it');
  }
  // every tools/call, task or not, is a span continuing the caller's trace and counts in the request metric
  internals._requestHandlers.set('tools/call', (request, ctx) => {
    const name = request.params?.['name'];
    const attributes = {
      [ATTR.operationName]: 'execute_tool',
      ...(typeof name === 'string' && { [ATTR.toolName]: name.slice(0, 256) }),
    };
    return tasks.telemetry.request('tools/call', request.params?.['_meta'], attributes, async (span) => {
      const task = await toolsCall(request, ctx, span);
      const taskId = (task as { resultType?: unknown; taskId?: unknown } | undefined)?.taskId;
      if (typeof taskId === 'string') span.setAttribute(ATTR.taskId, taskId);
      return task;
    });
  });
  const toolsCall = async (
    request: { method: string; params?: Record<string, unknown> },
    ctx: ServerContext,
    span: Span,
  ): Promise<unknown> => {
    const name = request.params?.['name'];
    const tool = typeof name === 'string' ? tasks.tool(name) : undefined;
    if (!tool || tool.support === 'never') return sdkToolsCall(request, ctx);
    if (!declaresTasks(ctx)) {
      if (tool.support === 'required') {
        // spec: MUST return -32021 naming the extension when it cannot serve the request without a task
        throw new MissingRequiredClientCapabilityError(
          requiredTasksCapabilityData(),
          `Tool ${tool.name} runs only as a task: declare the io.modelcontextprotocol/tasks extension in the request's client capabilities`,
        );
      }
      return sdkToolsCall(request, ctx);
    }
    return callAsTask(tasks, tool, request.params ?? {}, ctx, principal(ctx), span);
  };

  registerTaskMethods(mcp, tasks, principal);
}

/** `tasks/get`, `tasks/update` and `tasks/cancel`, for the extension's declared callers only. */
function registerTaskMethods(mcp: McpServer, tasks: TaskServer, principal: (ctx: ServerContext) => string): void {
  const guard = (ctx: ServerContext) => {
    // spec: MUST return -32021 for tasks/* from a client that did not declare the extension
    if (!declaresTasks(ctx)) throw missingTasksCapability();
  };

  mcp.server.setRequestHandler(
    TASK_METHODS.get,
    { params: GetTaskParamsSchema, result: GetTaskResultSchema },
    async (params, ctx) => answerTaskGet(tasks, params, clientCapabilitiesOf(ctx), () => principal(ctx)),
  );
  mcp.server.setRequestHandler(
    TASK_METHODS.update,
    { params: UpdateTaskParamsSchema, result: EmptyResultSchema },
    async (params, ctx) => {
      return tasks.telemetry.request(TASK_METHODS.update, params._meta, { [ATTR.taskId]: params.taskId }, async () => {
        guard(ctx);
        await tasks.updateTask(params.taskId, principal(ctx), inputResponsesOf(params.inputResponses, ctx));
        return {};
      });
    },
  );
  mcp.server.setRequestHandler(
    TASK_METHODS.cancel,
    { params: CancelTaskParamsSchema, result: EmptyResultSchema },
    async (params, ctx) => {
      return tasks.telemetry.request(TASK_METHODS.cancel, params._meta, { [ATTR.taskId]: params.taskId }, async () => {
        guard(ctx);
        await tasks.cancelTask(params.taskId, principal(ctx));
        return {};
      });
    },
  );
}

/**
 * `tasks/get` (SEP-2663 "Getting Tasks"), the one set of rules both the SDK's per-request server and the fast path
 * (taskGetFastPath.ts) answer it with: a span and a metric, the capability check, and the principal-bound read.
 */
export function answerTaskGet(
  tasks: TaskServer,
  params: GetTaskParams,
  clientCapabilities: unknown,
  principal: () => string,
): Promise<DetailedTask> {
  return tasks.telemetry.request(TASK_METHODS.get, params._meta, { [ATTR.taskId]: params.taskId }, async () => {
    // spec: MUST return -32021 for tasks/* from a client that did not declare the extension
    if (!declaresTasksIn(clientCapabilities)) throw missingTasksCapability();
    return tasks.getTask(params.taskId, principal());
  });
}

function missingTasksCapability(): MissingRequiredClientCapabilityError {
  return new MissingRequiredClientCapabilityError(
    requiredTasksCapabilityData(),
    'tasks/* requests must declare the io.modelcontextprotocol/tasks extension in their client capabilities',
  );
}

/** The request's declared client capabilities (the SDK's typings declare the envelope as {}). */
function clientCapabilitiesOf(ctx: ServerContext): unknown {
  const envelope = (ctx.mcpReq as { envelope?: Record<string, unknown> }).envelope;
  return envelope?.[CLIENT_CAPABILITIES_META_KEY];
}

function declaresTasks(ctx: ServerContext): boolean {
  return declaresTasksIn(clientCapabilitiesOf(ctx));
}

/** Whether declared client capabilities include the Tasks extension (SEP-2663 "Capability Negotiation"). */
export function declaresTasksIn(clientCapabilities: unknown): boolean {
  const capabilities = clientCapabilities as { extensions?: Record<string, unknown> } | undefined;
  const declared = capabilities?.extensions?.[TASKS_EXTENSION_ID];
  return typeof declared === 'object' && declared !== null;
}

// the same key is the same task on every store: a key one store could not keep as it was sent is refused here
const IdempotencyKeySchema = storable(
  z
    .string({ error: `_meta["${IDEMPOTENCY_KEY_META_KEY}"] must be a string` })
    .min(1, { error: `_meta["${IDEMPOTENCY_KEY_META_KEY}"] must not be empty` })
    .max(256, { error: `_meta["${IDEMPOTENCY_KEY_META_KEY}"] must be at most 256 characters` }),
  `_meta["${IDEMPOTENCY_KEY_META_KEY}"]`,
);

async function callAsTask(
  tasks: TaskServer,
  tool: RegisteredTaskTool,
  params: Record<string, unknown>,
  ctx: ServerContext,
  principal: string,
  span: Span,
): Promise<unknown> {
  const rawArgs = params['arguments'] ?? {};
  if (typeof rawArgs !== 'object' || rawArgs === null || Array.isArray(rawArgs)) {
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `Invalid arguments for tool ${tool.name}: expected an object`,
    );
  }
  let args = rawArgs as JsonObject;
  if (tool.config.inputSchema) {
    const parsed = await tool.config.inputSchema.safeParseAsync(args);
    if (!parsed.success) {
      throw new ProtocolError(
        ProtocolErrorCode.InvalidParams,
        `Input validation error: Invalid arguments for tool ${tool.name}: ${z.prettifyError(parsed.error)}`,
      );
    }
    args = parsed.data;
  }
  const meta = params['_meta'] as Record<string, unknown> | undefined;
  let idempotencyKey: string | undefined;
  if (meta?.[IDEMPOTENCY_KEY_META_KEY] !== undefined) {
    const parsed = IdempotencyKeySchema.safeParse(meta[IDEMPOTENCY_KEY_META_KEY]);
    if (!parsed.success) throw new ProtocolError(ProtocolErrorCode.InvalidParams, parsed.error.issues[0]!.message);
    idempotencyKey = parsed.data;
  }
  if (tool.config.prepare) {
    const prepared = await tool.config.prepare(args as never, ctx);
    if (isInputRequired(prepared)) return prepared;
    args = prepared as JsonObject;
  }
  // the task keeps the trace context of this tools/call: every run of its handler joins the caller's trace
  return tasks.createTask(
    tool,
    args,
    principal,
    idempotencyKey,
    inputCapabilitiesOf(clientCapabilitiesOf(ctx)),
    carrierOfSpan(span, meta),
  );
}

function isInputRequired(value: unknown): boolean {
  return (
    typeof value === 'object' && value !== null && (value as { resultType?: unknown }).resultType === 'input_required'
  );
}

/**
 * The SDK lifts `inputResponses` out of the params into the context, keeping the entries that are bare response
 * objects and naming the others in `droppedInputResponseKeys`: those are refused here, precisely.
 */
function inputResponsesOf(fromParams: unknown, ctx: ServerContext): Record<string, InputResponse> {
  const mcpReq = ctx.mcpReq as { inputResponses?: unknown; droppedInputResponseKeys?: string[] };
  const dropped = mcpReq.droppedInputResponseKeys ?? [];
  if (dropped.length > 0) {
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `Invalid params for tasks/update: inputResponses[${JSON.stringify(dropped[0])}] must be a response object (an ElicitResult, CreateMessageResult or ListRootsResult)`,
    );
  }
  const parsed = InputResponsesSchema.safeParse(mcpReq.inputResponses ?? fromParams ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    // a key refused by the key's own schema (too long, NUL, a lone surrogate) says which rule it broke
    const detail = issue?.code === 'invalid_key' ? (issue.issues[0]?.message ?? issue.message) : issue?.message;
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `Invalid params for tasks/update: inputResponses must map input keys to response objects (${detail})`,
    );
  }
  return parsed.data;
}
