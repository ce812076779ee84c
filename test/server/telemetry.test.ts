// The server's OpenTelemetry (docs/operations.md, "Observability"): a tools/call continues the caller's trace from
// `_meta.traceparent`, the handler's run is a span in that trace (status messages as events, input waits as spans),
// the trace context is stored with the task, the metrics count requests, runs, waits and store calls, and no
// argument, answer or result ever reaches a span or a metric.
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import type { TaskServer } from '../../src/server/taskServer.js';
import { rpc } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const SECRET_ARGUMENT = 'argument-secret-7f3a';
const SECRET_ANSWER = 'answer-secret-91bd';
const SECRET_RESULT = 'result-secret-c402';
const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';

function telemetry() {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    spans,
    tracerProvider,
    meterProvider,
    /** Every data point of the metric `name` as { attributes, value } (value: a sum, or a histogram's count). */
    async points(name: string): Promise<Array<{ attributes: Record<string, unknown>; value: number }>> {
      metricExporter.reset();
      await reader.forceFlush();
      const found = [];
      for (const resource of metricExporter.getMetrics()) {
        for (const scope of resource.scopeMetrics) {
          for (const metric of scope.metrics) {
            if (metric.descriptor.name !== name) continue;
            for (const point of metric.dataPoints) {
              const value = point.value as number | { count: number };
              found.push({
                attributes: point.attributes as Record<string, unknown>,
                value: typeof value === 'number' ? value : value.count,
              });
            }
          }
        }
      }
      return found;
    },
    async everything(): Promise<string> {
      metricExporter.reset();
      await reader.forceFlush();
      return JSON.stringify({ spans: spans.getFinishedSpans().map(spanView), metrics: metricExporter.getMetrics() });
    },
  };
}

function spanView(span: ReadableSpan) {
  return {
    name: span.name,
    kind: span.kind,
    traceId: span.spanContext().traceId,
    spanId: span.spanContext().spanId,
    parentSpanId: span.parentSpanContext?.spanId,
    attributes: span.attributes,
    events: span.events.map((e) => ({ name: e.name, attributes: e.attributes })),
    status: span.status,
  };
}

function registerTools(tasks: TaskServer): void {
  tasks.registerTool(
    'ask_and_answer',
    { inputSchema: z.object({ secret: z.string() }), task: { support: 'optional' } },
    async ({ secret }, ctx) => {
      await ctx.status('Asking for approval');
      const answer = await ctx.input('approval', {
        method: 'elicitation/create',
        params: {
          mode: 'form',
          message: 'Approve?',
          requestedSchema: { type: 'object', properties: { note: { type: 'string' } } },
        },
      });
      await ctx.status('Approved');
      const note = (answer['content'] as { note?: string } | undefined)?.note ?? '';
      return { content: [{ type: 'text', text: `${SECRET_RESULT} ${secret.length} ${note.length}` }] };
    },
  );
}

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

describe('server telemetry', () => {
  it('puts the call, the run, its status messages and its input wait in the caller’s trace, and counts them', async () => {
    const t = telemetry();
    server = await startTestServer(registerTools, {
      server: { telemetry: { tracerProvider: t.tracerProvider, meterProvider: t.meterProvider } },
    });
    const created = await rpc(
      server.url,
      'tools/call',
      { name: 'ask_and_answer', arguments: { secret: SECRET_ARGUMENT } },
      { capabilities: { elicitation: {} }, meta: { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` } },
    );
    expect(created.error).toBeUndefined();
    const taskId = created.result!['taskId'] as string;
    await waitFor('the input request', async () => {
      const r = await rpc(server!.url, 'tasks/get', { taskId });
      return r.result?.['status'] === 'input_required' ? true : undefined;
    });
    // while it waits, the open-tasks gauge says so
    expect(await t.points('closeout.server.tasks.open')).toEqual([
      {
        attributes: expect.objectContaining({
          'gen_ai.tool.name': 'ask_and_answer',
          'closeout.task.status': 'input_required',
        }),
        value: 1,
      },
    ]);
    const update = await rpc(
      server.url,
      'tasks/update',
      { taskId, inputResponses: { approval: { action: 'accept', content: { note: SECRET_ANSWER } } } },
      { meta: { traceparent: `00-${CALLER_TRACE}-00f067aa0ba902b7-01` } },
    );
    expect(update.error).toBeUndefined();
    await waitFor('the task to complete', async () => {
      const r = await rpc(server!.url, 'tasks/get', { taskId });
      return r.result?.['status'] === 'completed' ? true : undefined;
    });
    await waitFor('the run span', async () =>
      t.spans.getFinishedSpans().some((s) => s.name === 'task.run ask_and_answer') ? true : undefined,
    );

    const spans = t.spans.getFinishedSpans().map(spanView);
    const call = spans.find((s) => s.name === 'tools/call ask_and_answer')!;
    expect(call).toMatchObject({
      kind: 1, // SpanKind.SERVER
      traceId: CALLER_TRACE,
      parentSpanId: CALLER_SPAN,
      attributes: {
        'mcp.method.name': 'tools/call',
        'gen_ai.tool.name': 'ask_and_answer',
        'gen_ai.operation.name': 'execute_tool',
        'closeout.task.id': taskId,
      },
    });
    const run = spans.find((s) => s.name === 'task.run ask_and_answer')!;
    expect(run).toMatchObject({
      traceId: CALLER_TRACE,
      parentSpanId: call.spanId,
      attributes: { 'closeout.task.id': taskId, 'closeout.task.attempt': 1, 'closeout.task.status': 'completed' },
    });
    expect(run.events.map((e) => e.attributes?.['closeout.task.status_message'])).toEqual([
      'Asking for approval',
      'Approved',
    ]);
    const wait = spans.find((s) => s.name === 'task.input_wait')!;
    expect(wait).toMatchObject({
      traceId: CALLER_TRACE,
      parentSpanId: run.spanId,
      attributes: { 'closeout.task.input.key': 'approval' },
    });
    expect(spans.find((s) => s.name === 'tasks/update')).toMatchObject({
      traceId: CALLER_TRACE,
      parentSpanId: '00f067aa0ba902b7',
      attributes: { 'mcp.method.name': 'tasks/update', 'closeout.task.id': taskId },
    });
    // a tasks/get without trace context starts a trace of its own
    expect(spans.filter((s) => s.name === 'tasks/get').every((s) => s.traceId !== CALLER_TRACE)).toBe(true);

    // the task keeps the tools/call span's context: a later run (another instance, after a restart) joins it
    const stored = await server.store.get(taskId);
    expect(stored?.traceContext).toEqual({ traceparent: `00-${CALLER_TRACE}-${call.spanId}-01` });

    expect(await t.points('closeout.server.task.attempts')).toEqual([
      { attributes: { 'gen_ai.tool.name': 'ask_and_answer', 'closeout.task.rerun': false }, value: 1 },
    ]);
    expect(await t.points('closeout.server.task.duration')).toEqual([
      { attributes: { 'gen_ai.tool.name': 'ask_and_answer', 'closeout.task.status': 'completed' }, value: 1 },
    ]);
    expect(await t.points('closeout.server.task.input_wait.duration')).toEqual([
      { attributes: { 'gen_ai.tool.name': 'ask_and_answer' }, value: 1 },
    ]);
    const requests = await t.points('mcp.server.operation.duration');
    const count = (method: string) =>
      requests.filter((p) => p.attributes['mcp.method.name'] === method).reduce((n, p) => n + p.value, 0);
    expect(count('tools/call')).toBe(1);
    expect(count('tasks/update')).toBe(1);
    expect(count('tasks/get')).toBeGreaterThanOrEqual(2);
    const storeCalls = await t.points('closeout.server.store.operation.duration');
    expect(storeCalls.find((p) => p.attributes['closeout.store.operation'] === 'create')?.value).toBe(1);
    expect(await t.points('closeout.server.tasks.open')).toEqual([
      { attributes: { 'gen_ai.tool.name': 'ask_and_answer', 'closeout.task.status': 'input_required' }, value: 0 },
    ]);

    const everything = await t.everything();
    for (const secret of [SECRET_ARGUMENT, SECRET_ANSWER, SECRET_RESULT]) expect(everything).not.toContain(secret);
  });

  it('counts a failed store call by operation, with its error type, on the failed request', async () => {
    const t = telemetry();
    server = await startTestServer(registerTools, {
      server: { telemetry: { tracerProvider: t.tracerProvider, meterProvider: t.meterProvider } },
    });
    await server.store.close();
    const r = await rpc(server.url, 'tasks/get', { taskId: 'no-such-task' });
    expect(r.error?.code).toBe(-32603);
    expect(await t.points('closeout.server.store.errors')).toEqual([
      { attributes: { 'closeout.store.operation': 'get', 'error.type': 'TypeError' }, value: 1 },
    ]);
    const get = t.spans.getFinishedSpans().find((s) => s.name === 'tasks/get')!;
    expect(get.attributes['error.type']).toBe('-32603');
    expect(get.status.code).toBe(2); // SpanStatusCode.ERROR
    server = undefined; // its store is closed already; the temp dir stays for the OS to clean
  });

  it('ignores a malformed traceparent and starts a trace of its own', async () => {
    const t = telemetry();
    server = await startTestServer(registerTools, {
      server: { telemetry: { tracerProvider: t.tracerProvider, meterProvider: t.meterProvider } },
    });
    const r = await rpc(
      server.url,
      'tasks/get',
      { taskId: 'unknown' },
      { meta: { traceparent: `00-${'0'.repeat(32)}-${CALLER_SPAN}-01`, tracestate: 'a=b' } },
    );
    expect(r.error?.code).toBe(-32602);
    const get = t.spans.getFinishedSpans().find((s) => s.name === 'tasks/get')!;
    expect(get.spanContext().traceId).not.toBe('0'.repeat(32));
    expect(get.parentSpanContext).toBeUndefined();
  });
});
