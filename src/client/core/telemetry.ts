/**
 * OpenTelemetry for the client half (docs/operations.md, "Observability"): a CLIENT span per tools/call, tasks/get (a poll),
 * tasks/update and tasks/cancel, whose trace context goes out in `_meta` (spec 2026-07-28, basic/index, "OpenTelemetry
 * trace context"); a span per input handler call and one per close-out; and the client's metrics. Only the
 * OpenTelemetry API is used: without an SDK registered by the application every call here is the API's no-op.
 * Arguments, answers and results never go into telemetry.
 */
import {
  type Attributes,
  type Context,
  context,
  type MeterProvider,
  metrics,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

import { TASK_STATUS_NOTIFICATION_METHOD } from '../../protocol/constants.js';
import { TASK_METHODS, TASK_STATUSES } from '../../protocol/index.js';
import {
  BAGGAGE_META_KEY,
  type TraceCarrier,
  TRACEPARENT_META_KEY,
  TRACESTATE_META_KEY,
} from '../../protocol/traceContext.js';
import { carrierOf, contextOf } from '../../shared/telemetryContext.js';
import type { TaskInputHandlers } from '../input/inputRouter.js';
import type { Ledger, LocalState, TaskRecord } from '../ledger/ledger.js';
import { LOCAL_STATES } from '../ledger/ledger.js';

/** The instrumentation scope of every span and metric of the client half. */
export const CLIENT_TELEMETRY_SCOPE = 'closeout/client';

/** Where the client's telemetry goes. Default: the providers registered globally with the OpenTelemetry API. */
export interface ClientTelemetryOptions {
  tracerProvider?: TracerProvider;
  meterProvider?: MeterProvider;
}

const ATTR = {
  methodName: 'mcp.method.name',
  toolName: 'gen_ai.tool.name',
  errorType: 'error.type',
  taskId: 'closeout.task.id',
  status: 'closeout.task.status',
  inputKey: 'closeout.task.input.key',
  localState: 'closeout.record.local_state',
} as const;

/** A submission's span context, and its trace context as the ledger keeps it (undefined: no span, no SDK). */
export interface CallTrace {
  context: Context;
  carrier: TraceCarrier | undefined;
}

/** Open tasks remembered for joining their polls to the trace of their tools/call (this process only). */
const MAX_REMEMBERED_TRACES = 10_000;

export class ClientTelemetry {
  private readonly tracer: Tracer;
  private readonly operationDuration;
  private readonly polls;
  private readonly pollErrors;
  private readonly notifications;
  private readonly closeouts;
  private readonly lateness;
  private readonly unknownOutcomes;
  /**
   * taskId -> the context of the call that created the task (its span, and the caller's baggage): every later request
   * about the task joins it. Filled by the call in this process, or from the ledger by `follow` after a restart.
   */
  private readonly taskTraces = new Map<string, Context>();

  constructor(options: ClientTelemetryOptions, ledger: Ledger, endpoint: string) {
    this.tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(CLIENT_TELEMETRY_SCOPE);
    const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(CLIENT_TELEMETRY_SCOPE);
    this.operationDuration = meter.createHistogram('mcp.client.operation.duration', {
      description: 'MCP requests sent (tools/call and the tasks/* methods), by method',
      unit: 's',
    });
    this.polls = meter.createCounter('closeout.client.polls', { description: 'tasks/get sent to follow a task' });
    this.pollErrors = meter.createCounter('closeout.client.poll.errors', {
      description: 'tasks/get that got no usable answer (transport failure, JSON-RPC error, bad output)',
    });
    this.notifications = meter.createCounter('closeout.client.notifications', {
      description: 'notifications/tasks handled (pushed task states of followed tasks)',
    });
    this.closeouts = meter.createCounter('closeout.client.closeouts', {
      description: 'Records closed out, by local state (terminal, expired, unknown-outcome)',
    });
    this.lateness = meter.createHistogram('closeout.client.closeout.lateness', {
      description:
        'From the task’s last update on the server to its close-out here (server clock against this one: skew included)',
      unit: 's',
    });
    this.unknownOutcomes = meter.createCounter('closeout.client.unknown_outcomes', {
      description: 'Submissions whose answer was lost (sent, no answer recorded)',
    });
    // read only when a reader collects: one ledger read per collection, none on the serving path
    meter
      .createObservableUpDownCounter('closeout.client.records.open', {
        description: 'Ledger records of this endpoint not closed out, by local state',
      })
      .addCallback(async (result) => {
        const counts = new Map<LocalState, number>(OPEN_STATES.map((s) => [s, 0]));
        const records = await ledger.list({ endpoint, localStates: OPEN_STATES });
        for (const record of records) counts.set(record.localState, (counts.get(record.localState) ?? 0) + 1);
        for (const [state, n] of counts) result.observe(n, { [ATTR.localState]: state });
      });
  }

  /**
   * Sends one request under a CLIENT span, with the span's trace context added to `meta` (which the request carries).
   * `accepted` tells an error that is an answer (the SDK carrier of a CreateTaskResult) from a failure.
   */
  async request<T>(
    method: string,
    attributes: Attributes,
    meta: Record<string, unknown>,
    send: () => Promise<T>,
    accepted?: (error: unknown) => boolean,
    call?: CallTrace,
  ): Promise<T> {
    const taskId = attributes[ATTR.taskId];
    const parent =
      call?.context ?? (typeof taskId === 'string' ? this.taskTraces.get(taskId) : undefined) ?? context.active();
    const toolName = attributes[ATTR.toolName];
    const span = this.tracer.startSpan(
      toolName === undefined ? method : `${method} ${String(toolName)}`,
      { kind: SpanKind.CLIENT, attributes: { [ATTR.methodName]: method, ...attributes } },
      parent,
    );
    const spanContext = trace.setSpan(parent, span);
    inject(spanContext, meta);
    if (method === TASK_METHODS.get) this.polls.add(1);
    const startedAt = performance.now();
    let errorType: string | undefined;
    try {
      return await context.with(spanContext, send);
    } catch (error) {
      if (!accepted?.(error)) {
        errorType = errorTypeOf(error);
        span.setAttribute(ATTR.errorType, errorType);
        span.setStatus({ code: SpanStatusCode.ERROR });
        if (method === TASK_METHODS.get) this.pollErrors.add(1, { [ATTR.errorType]: errorType });
      }
      throw error;
    } finally {
      span.end();
      this.operationDuration.record((performance.now() - startedAt) / 1000, {
        [ATTR.methodName]: method,
        ...(toolName !== undefined && { [ATTR.toolName]: toolName }),
        ...(errorType !== undefined && { [ATTR.errorType]: errorType }),
      });
    }
  }

  /**
   * One submission (`callTool`, `resubmit`): a span from the intent to the handle or result, under the application's
   * active context. `work` gets the span's context, to pass to `request` and `taskCreated`, and its trace context
   * (with the caller's baggage) to keep with the record, so the task's polls and close-out join this trace in whichever
   * process follows it (undefined without an SDK).
   */
  async call<T>(toolName: string, work: (call: CallTrace) => Promise<T>): Promise<T> {
    const span = this.tracer.startSpan(`call ${toolName}`, { attributes: { [ATTR.toolName]: toolName } });
    return inSpan(span, context.active(), (callContext) =>
      work({ context: callContext, carrier: carrierOf(callContext) }),
    );
  }

  /** A task the server created for a call: its later requests in this process join the call's trace. */
  taskCreated(taskId: string, call: CallTrace): void {
    if (call.carrier) this.remember(taskId, call.context);
  }

  /** A record this process follows (resumed, attached, taken over): its requests join the trace the ledger kept. */
  follow(record: TaskRecord): void {
    if (record.taskId === undefined || this.taskTraces.has(record.taskId)) return;
    const stored = contextOf(record.traceContext);
    if (stored) this.remember(record.taskId, stored);
  }

  private remember(taskId: string, traceContext: Context): void {
    if (this.taskTraces.size >= MAX_REMEMBERED_TRACES) this.taskTraces.delete(this.taskTraces.keys().next().value!);
    this.taskTraces.set(taskId, traceContext);
  }

  /**
   * One `notifications/tasks` handled (recorded like a poll's answer): a CONSUMER span in the call's trace, like a
   * poll's. Only the status goes into it, and only when it is one of the spec's.
   */
  notification<T>(taskId: string, status: unknown, handle: () => Promise<T>): Promise<T> {
    const parent = this.taskTraces.get(taskId) ?? context.active();
    const known = TASK_STATUSES.find((s) => s === status);
    const span = this.tracer.startSpan(
      TASK_STATUS_NOTIFICATION_METHOD,
      {
        kind: SpanKind.CONSUMER,
        attributes: {
          [ATTR.methodName]: TASK_STATUS_NOTIFICATION_METHOD,
          [ATTR.taskId]: taskId,
          ...(known !== undefined && { [ATTR.status]: known }),
        },
      },
      parent,
    );
    this.notifications.add(1);
    return inSpan(span, parent, handle);
  }

  /** One call of an application's input handler for a task's input request. */
  async inputHandler<T>(taskId: string | undefined, key: string, method: string, call: () => Promise<T>): Promise<T> {
    const parent = (taskId === undefined ? undefined : this.taskTraces.get(taskId)) ?? context.active();
    const span = this.tracer.startSpan(
      `input ${method}`,
      { attributes: { [ATTR.inputKey]: key, ...(taskId !== undefined && { [ATTR.taskId]: taskId }) } },
      parent,
    );
    return inSpan(span, parent, call);
  }

  /** The application's input handlers, each call under a span of its own. */
  traceHandlers(handlers: TaskInputHandlers): TaskInputHandlers {
    const { elicitation, sampling, roots } = handlers;
    return {
      ...(elicitation && {
        elicitation: (request, ctx) =>
          this.inputHandler(ctx.taskId, ctx.key, request.method, async () => elicitation(request, ctx)),
      }),
      ...(sampling && {
        sampling: (request, ctx) =>
          this.inputHandler(ctx.taskId, ctx.key, request.method, async () => sampling(request, ctx)),
      }),
      ...(roots && {
        roots: (request, ctx) =>
          this.inputHandler(ctx.taskId, ctx.key, request.method, async () => roots(request, ctx)),
      }),
    };
  }

  /** A record closed out (result or error stored, expired, or unknown outcome): a span and the close-out metrics. */
  closedOut(record: TaskRecord, now: number): void {
    const taskId = record.taskId;
    // the call's trace: as this process remembers it, else as the ledger kept it (a record it never followed)
    const known = (taskId === undefined ? undefined : this.taskTraces.get(taskId)) ?? contextOf(record.traceContext);
    const span = this.tracer.startSpan(
      'closeout',
      {
        attributes: {
          [ATTR.localState]: record.localState,
          [ATTR.toolName]: record.toolName,
          ...(taskId !== undefined && { [ATTR.taskId]: taskId }),
          ...(record.status !== undefined && { [ATTR.status]: record.status }),
        },
      },
      known ?? context.active(),
    );
    span.end();
    if (taskId !== undefined) this.taskTraces.delete(taskId);
    this.closeouts.add(1, { [ATTR.localState]: record.localState });
    if (record.localState === 'unknown-outcome') this.unknownOutcomes.add(1);
    const lastUpdatedAt = record.lastUpdatedAt === undefined ? NaN : Date.parse(record.lastUpdatedAt);
    if (record.localState === 'terminal' && Number.isFinite(lastUpdatedAt)) {
      this.lateness.record(Math.max(0, now - lastUpdatedAt) / 1000, { [ATTR.toolName]: record.toolName });
    }
  }
}

const OPEN_STATES: LocalState[] = LOCAL_STATES.filter(
  (s) => s === 'submitting' || s === 'tracking' || s === 'detached',
);

/**
 * Adds the W3C trace context of the span in `spanContext` to a request's `_meta` (nothing when the span has none: no
 * SDK, no parent), and the context's baggage (spec 2026-07-28, basic/index: `baggage` is reserved for W3C Baggage),
 * as the application's registered propagator writes it.
 */
function inject(spanContext: Context, meta: Record<string, unknown>): void {
  const carrier = carrierOf(spanContext);
  if (!carrier) return;
  meta[TRACEPARENT_META_KEY] = carrier.traceparent;
  if (carrier.tracestate) meta[TRACESTATE_META_KEY] = carrier.tracestate;
  if (carrier.baggage) meta[BAGGAGE_META_KEY] = carrier.baggage;
}

/** Runs `work` with `span` current under `parent`; a failure marks the span, which ends either way. */
async function inSpan<T>(span: Span, parent: Context, work: (spanContext: Context) => Promise<T>): Promise<T> {
  const spanContext = trace.setSpan(parent, span);
  try {
    return await context.with(spanContext, () => work(spanContext));
  } catch (error) {
    span.setAttribute(ATTR.errorType, errorTypeOf(error));
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}

function errorTypeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'number' && Number.isSafeInteger(code)) return String(code);
  return error instanceof Error ? error.name : 'unknown';
}
