/**
 * OpenTelemetry for the server half (docs/operations.md, "Observability"): spans for the MCP requests and for every run of a
 * task's handler, all in the trace of the call that created the task, and the server's metrics. Only the
 * OpenTelemetry API is used: without an SDK registered by the application every call here is the API's no-op.
 *
 * Names follow the OpenTelemetry semantic conventions for MCP where they exist (`mcp.method.name`,
 * `gen_ai.tool.name`, `mcp.server.operation.duration`, `error.type`); task-specific ones are `closeout.*`. Arguments,
 * answers and results never go into telemetry: only ids, names, statuses, counts and durations (and a handler's own
 * status messages, which it shows its client anyway).
 */
import {
  type Attributes,
  type Context,
  context,
  type Histogram,
  type Meter,
  type MeterProvider,
  metrics,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

import { type TraceCarrier, traceCarrierOf } from '../protocol/traceContext.js';
import { carrierOf, contextOf } from '../shared/telemetryContext.js';
import type { StoredTask, TaskStore, TerminalOutcome } from './store/taskStore.js';

/** The instrumentation scope of every span and metric of the server half. */
export const TELEMETRY_SCOPE = 'closeout/server';

/** Attribute names: the semantic conventions' where they exist, `closeout.*` for what is ours. */
export const ATTR = {
  methodName: 'mcp.method.name',
  toolName: 'gen_ai.tool.name',
  operationName: 'gen_ai.operation.name',
  errorType: 'error.type',
  taskId: 'closeout.task.id',
  attempt: 'closeout.task.attempt',
  status: 'closeout.task.status',
  statusMessage: 'closeout.task.status_message',
  inputKey: 'closeout.task.input.key',
  rerun: 'closeout.task.rerun',
  takeoverOutcome: 'closeout.takeover.outcome',
  storeOperation: 'closeout.store.operation',
} as const;

/** Where the server's telemetry goes. Default: the providers registered globally with the OpenTelemetry API. */
export interface TelemetryOptions {
  tracerProvider?: TracerProvider;
  meterProvider?: MeterProvider;
}

/** What happened to a task whose lease this instance took over (docs/DESIGN.md, "The task's life on the server", 7). */
export type TakeoverOutcome = 'rerun' | 'interrupted' | 'cancelled' | 'continued';

/** A handler run as this instance holds it, as the open-tasks gauge reads it. */
export interface RunView {
  toolName: string;
  waitingForInput: boolean;
}

/** The store methods timed by `instrumentStore` (all of TaskStore's but `subscribe` and `close`). */
const STORE_OPERATIONS = new Set<string>([
  'create',
  'get',
  'wasPurged',
  'setStatusMessage',
  'requestInput',
  'finish',
  'answerInputs',
  'requestCancel',
  'renewLeases',
  'answeredInputs',
  'claimOrphans',
  'leaseHolders',
  'expireOverdue',
  'purge',
]);

/** Histogram buckets in seconds: from a store write (milliseconds) to a task that waits for a person (hours). */
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600, 21_600, 86_400];
const STORE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export class ServerTelemetry {
  readonly tracer: Tracer;
  private readonly operationDuration: Histogram;
  private readonly taskDuration: Histogram;
  private readonly inputWait: Histogram;
  private readonly attempts;
  private readonly takeovers;
  private readonly storeDuration: Histogram;
  private readonly storeErrors;

  constructor(options: TelemetryOptions, runs: () => Iterable<RunView>) {
    this.tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(TELEMETRY_SCOPE);
    const meter: Meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(TELEMETRY_SCOPE);
    this.operationDuration = meter.createHistogram('mcp.server.operation.duration', {
      description: 'MCP requests served (tools/call and the tasks/* methods), by method',
      unit: 's',
      advice: { explicitBucketBoundaries: STORE_BUCKETS },
    });
    this.taskDuration = meter.createHistogram('closeout.server.task.duration', {
      description: 'From a task’s creation to its terminal state, as written by this instance',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.inputWait = meter.createHistogram('closeout.server.task.input_wait.duration', {
      description: 'How long a handler waited for an input response (ctx.input)',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.attempts = meter.createCounter('closeout.server.task.attempts', {
      description: 'Handler runs started; closeout.task.rerun is true for a re-run after a takeover',
    });
    this.takeovers = meter.createCounter('closeout.server.lease.takeovers', {
      description: 'Tasks whose expired lease this instance took over, by what it did with them',
    });
    this.storeDuration = meter.createHistogram('closeout.server.store.operation.duration', {
      description: 'Task store calls, by operation; error.type is set on the failed ones',
      unit: 's',
      advice: { explicitBucketBoundaries: STORE_BUCKETS },
    });
    this.storeErrors = meter.createCounter('closeout.server.store.errors', {
      description: 'Task store calls that failed (unreachable, locked, refused), by operation',
    });
    // read only when a reader collects: no cost on the serving path
    const openCounts = new Map<string, { toolName: string; status: string; n: number }>();
    meter
      .createObservableUpDownCounter('closeout.server.tasks.open', {
        description: 'Tasks whose handler runs in this instance, by tool and status (working, input_required)',
      })
      .addCallback((result) => {
        // a combination seen before and gone now is reported as 0, not left at its last value
        for (const entry of openCounts.values()) entry.n = 0;
        for (const run of runs()) {
          const status = run.waitingForInput ? 'input_required' : 'working';
          const key = `${status}\u0000${run.toolName}`;
          const entry = openCounts.get(key) ?? { toolName: run.toolName, status, n: 0 };
          entry.n++;
          openCounts.set(key, entry);
        }
        for (const { toolName, status, n } of openCounts.values()) {
          result.observe(n, { [ATTR.toolName]: toolName, [ATTR.status]: status });
        }
      });
  }

  /**
   * Runs one MCP request under a SERVER span that continues the caller's trace (`_meta.traceparent`), and counts it
   * in `mcp.server.operation.duration`. The span is handed to `serve` so a `tools/call` can keep its context.
   */
  async request<T>(
    method: string,
    meta: unknown,
    attributes: Attributes,
    serve: (span: Span) => Promise<T>,
  ): Promise<T> {
    const target = attributes[ATTR.toolName] ?? attributes[ATTR.taskId];
    const carrier = traceCarrierOf(meta);
    // the caller's trace when it sent one, else whatever the application's own instrumentation made current
    const parent = contextOf(carrier) ?? context.active();
    const span = this.tracer.startSpan(
      target === undefined || method.startsWith('tasks/') ? method : `${method} ${String(target)}`,
      { kind: SpanKind.SERVER, attributes: { [ATTR.methodName]: method, ...attributes } },
      parent,
    );
    const startedAt = performance.now();
    let errorType: string | undefined;
    try {
      return await context.with(trace.setSpan(parent, span), () => serve(span));
    } catch (error) {
      errorType = errorTypeOf(error);
      span.setAttribute(ATTR.errorType, errorType);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : undefined });
      throw error;
    } finally {
      span.end();
      const toolName = attributes[ATTR.toolName];
      this.operationDuration.record((performance.now() - startedAt) / 1000, {
        [ATTR.methodName]: method,
        ...(toolName !== undefined && { [ATTR.toolName]: toolName }),
        ...(errorType !== undefined && { [ATTR.errorType]: errorType }),
      });
    }
  }

  /** One run (attempt) of a task's handler: a span in the task's trace, with its status messages and input waits. */
  run(task: StoredTask): RunTelemetry {
    return new RunTelemetry(this, task);
  }

  /** @internal */
  recordRunStarted(task: StoredTask): void {
    this.attempts.add(1, { [ATTR.toolName]: task.toolName, [ATTR.rerun]: task.attempt > 1 });
  }

  /** @internal */
  recordInputWait(toolName: string, seconds: number): void {
    this.inputWait.record(seconds, { [ATTR.toolName]: toolName });
  }

  /** @internal */
  recordTaskEnded(task: StoredTask, status: string, now: number): void {
    this.taskDuration.record(Math.max(0, now - task.createdAt) / 1000, {
      [ATTR.toolName]: task.toolName,
      [ATTR.status]: status,
    });
  }

  leaseTakeover(toolName: string, outcome: TakeoverOutcome): void {
    this.takeovers.add(1, { [ATTR.toolName]: toolName, [ATTR.takeoverOutcome]: outcome });
  }

  /** The store with every call timed and its failures counted; the same object to every caller otherwise. */
  instrumentStore(store: TaskStore): TaskStore {
    const wrapped = new Map<string, (...args: unknown[]) => unknown>();
    return new Proxy(store, {
      get: (target, property, receiver) => {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof property !== 'string' || !STORE_OPERATIONS.has(property) || typeof value !== 'function') {
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        }
        let timed = wrapped.get(property);
        if (!timed) {
          const method = value as (...args: unknown[]) => Promise<unknown>;
          timed = (...args: unknown[]) => this.timeStoreCall(property, () => method.apply(target, args));
          wrapped.set(property, timed);
        }
        return timed;
      },
    });
  }

  private async timeStoreCall<T>(operation: string, call: () => Promise<T>): Promise<T> {
    const startedAt = performance.now();
    try {
      const value = await call();
      this.storeDuration.record((performance.now() - startedAt) / 1000, { [ATTR.storeOperation]: operation });
      return value;
    } catch (error) {
      const errorType = errorTypeOf(error);
      this.storeDuration.record((performance.now() - startedAt) / 1000, {
        [ATTR.storeOperation]: operation,
        [ATTR.errorType]: errorType,
      });
      this.storeErrors.add(1, { [ATTR.storeOperation]: operation, [ATTR.errorType]: errorType });
      throw error;
    }
  }
}

/**
 * The telemetry of one handler run. Its span is a child of the context stored with the task (the `tools/call` span
 * that created it), so attempt 2 after a restart or on another instance lands in the same trace as attempt 1.
 */
export class RunTelemetry {
  private span: Span | undefined;
  private parent: Context = ROOT_CONTEXT;

  constructor(
    private readonly telemetry: ServerTelemetry,
    private readonly task: StoredTask,
  ) {}

  /** Starts the run's span and makes it the active one while `handler` runs, so the handler's own spans nest in it. */
  within<T>(handler: () => T | PromiseLike<T>): Promise<T> {
    const task = this.task;
    this.parent = contextOf(task.traceContext) ?? ROOT_CONTEXT;
    this.span = this.telemetry.tracer.startSpan(
      `task.run ${task.toolName}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          [ATTR.toolName]: task.toolName,
          [ATTR.taskId]: task.taskId,
          [ATTR.attempt]: task.attempt,
        },
      },
      this.parent,
    );
    this.telemetry.recordRunStarted(task);
    return context.with(trace.setSpan(this.parent, this.span), async () => await handler());
  }

  /** A status message the handler set: an event on the run's span. */
  statusMessage(message: string): void {
    this.span?.addEvent('task.status_message', { [ATTR.statusMessage]: message.slice(0, 1024) });
  }

  /** A `ctx.input(key)` call: a span for the wait (a replayed answer comes back at once), timed in the wait metric. */
  async input<T>(key: string, wait: () => Promise<T>): Promise<T> {
    const span = this.telemetry.tracer.startSpan(
      'task.input_wait',
      { attributes: { [ATTR.taskId]: this.task.taskId, [ATTR.inputKey]: key } },
      this.span ? trace.setSpan(this.parent, this.span) : this.parent,
    );
    const startedAt = performance.now();
    try {
      return await wait();
    } catch (error) {
      span.setAttribute(ATTR.errorType, errorTypeOf(error));
      throw error;
    } finally {
      span.end();
      this.telemetry.recordInputWait(this.task.toolName, (performance.now() - startedAt) / 1000);
    }
  }

  /** The run is over: with the outcome it wrote, or none when it lost its lease or the server shut down. */
  ended(outcome: TerminalOutcome | undefined, now: number): void {
    const span = this.span;
    if (!span) return;
    this.span = undefined;
    if (outcome) {
      span.setAttribute(ATTR.status, outcome.status);
      if (outcome.status === 'failed') {
        span.setAttribute(ATTR.errorType, String(outcome.error.code));
        span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error.message });
      }
      this.telemetry.recordTaskEnded(this.task, outcome.status, now);
    } else {
      span.setAttribute(ATTR.status, 'handed_back');
    }
    span.end();
  }
}

/**
 * The trace context of a span, to keep with a task, with the caller's baggage from the request's `_meta` (spec
 * 2026-07-28, basic/index: `baggage` is reserved for W3C Baggage); undefined when the span has none (no SDK and no
 * caller's).
 */
export function carrierOfSpan(span: Span, meta?: unknown): TraceCarrier | undefined {
  const carrier = carrierOf(trace.setSpan(ROOT_CONTEXT, span));
  const baggage = traceCarrierOf(meta)?.baggage;
  return carrier && baggage !== undefined ? { ...carrier, baggage } : carrier;
}

/** `error.type`: the JSON-RPC code of a protocol error, else the error's class name. */
function errorTypeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'number' && Number.isSafeInteger(code)) return String(code);
  if (typeof code === 'string' && code.length <= 64) return code;
  return error instanceof Error ? error.name : 'unknown';
}
