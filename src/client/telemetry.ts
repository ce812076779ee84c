/**
 * OpenTelemetry for the client half (README.md, "Observability"): a CLIENT span per tools/call, tasks/get (a poll),
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
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

import { TASK_METHODS } from '../protocol/index.js';
import { formatTraceparent, TRACEPARENT_META_KEY, TRACESTATE_META_KEY } from '../protocol/traceContext.js';
import type { TaskInputHandlers } from './inputRouter.js';
import type { Ledger, LocalState, TaskRecord } from './ledger/ledger.js';
import { LOCAL_STATES } from './ledger/ledger.js';

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

/** Open tasks remembered for joining their polls to the trace of their tools/call (this process only). */
const MAX_REMEMBERED_TRACES = 10_000;

export class ClientTelemetry {
  private readonly tracer: Tracer;
  private readonly operationDuration;
  private readonly polls;
  private readonly pollErrors;
  private readonly closeouts;
  private readonly lateness;
  private readonly unknownOutcomes;
  /** taskId -> the tools/call span that created it, so later polls in this process join that trace. */
  private readonly taskTraces = new Map<string, SpanContext>();

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
    accepted?: (error: unknown, span: Span) => boolean,
  ): Promise<T> {
    const taskId = attributes[ATTR.taskId];
    const known = typeof taskId === 'string' ? this.taskTraces.get(taskId) : undefined;
    const parent: Context = known ? trace.setSpanContext(context.active(), known) : context.active();
    const toolName = attributes[ATTR.toolName];
    const span = this.tracer.startSpan(
      toolName === undefined ? method : `${method} ${String(toolName)}`,
      { kind: SpanKind.CLIENT, attributes: { [ATTR.methodName]: method, ...attributes } },
      parent,
    );
    inject(span, meta);
    if (method === TASK_METHODS.get) this.polls.add(1);
    const startedAt = performance.now();
    let errorType: string | undefined;
    try {
      return await context.with(trace.setSpan(parent, span), send);
    } catch (error) {
      if (!accepted?.(error, span)) {
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

  /** A task the server created in answer to the tools/call of `span`: its later requests join that trace. */
  taskCreated(taskId: string, span: Span | undefined): void {
    const spanContext = span?.spanContext();
    if (!spanContext || !trace.isSpanContextValid(spanContext)) return;
    if (this.taskTraces.size >= MAX_REMEMBERED_TRACES) this.taskTraces.delete(this.taskTraces.keys().next().value!);
    this.taskTraces.set(taskId, spanContext);
  }

  /** The active span (inside `request`), to hand to `taskCreated`. */
  activeSpan(): Span | undefined {
    return trace.getSpan(context.active());
  }

  /** One call of an application's input handler for a task's input request. */
  async inputHandler<T>(taskId: string | undefined, key: string, method: string, call: () => Promise<T>): Promise<T> {
    const known = taskId === undefined ? undefined : this.taskTraces.get(taskId);
    const parent = known ? trace.setSpanContext(context.active(), known) : context.active();
    const span = this.tracer.startSpan(
      `input ${method}`,
      { attributes: { [ATTR.inputKey]: key, ...(taskId !== undefined && { [ATTR.taskId]: taskId }) } },
      parent,
    );
    try {
      return await context.with(trace.setSpan(parent, span), call);
    } catch (error) {
      span.setAttribute(ATTR.errorType, errorTypeOf(error));
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span.end();
    }
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
    const known = taskId === undefined ? undefined : this.taskTraces.get(taskId);
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
      known ? trace.setSpanContext(context.active(), known) : context.active(),
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

/** Adds the span's W3C trace context to a request's `_meta` (nothing when the span has none: no SDK, no parent). */
function inject(span: Span, meta: Record<string, unknown>): void {
  const spanContext = span.spanContext();
  if (!trace.isSpanContextValid(spanContext)) return;
  meta[TRACEPARENT_META_KEY] = formatTraceparent(spanContext.traceId, spanContext.spanId, spanContext.traceFlags);
  const tracestate = spanContext.traceState?.serialize();
  if (tracestate) meta[TRACESTATE_META_KEY] = tracestate;
}

function errorTypeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'number' && Number.isSafeInteger(code)) return String(code);
  return error instanceof Error ? error.name : 'unknown';
}
