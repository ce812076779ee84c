// The client's OpenTelemetry (docs/operations.md, "Observability"): its tools/call, polls and tasks/update carry their trace
// context in `_meta`, so one trace holds the client's call (a span per callTool, parent of every request about the task), the server's tools/call, the handler's run, the input
// handler, every poll and the close-out; the client's metrics count polls, close-outs and open records; and no
// argument, answer or result reaches a span or a metric.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { context, propagation } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CBaggagePropagator } from '@opentelemetry/core';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import { connectHttpTaskClient, isTaskHandle, type TaskClient } from '../../src/client/index.js';
import { startTestServer, type TestServer } from '../support/testServer.js';

const SECRET_ARGUMENT = 'argument-secret-5e1c';
const SECRET_ANSWER = 'answer-secret-0d77';
const SECRET_RESULT = 'result-secret-a9f2';

let server: TestServer | undefined;
let client: TaskClient | undefined;
let dir: string | undefined;
afterEach(async () => {
  await client?.close();
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  client = server = dir = undefined;
});

/** The OpenTelemetry SDK with in-memory exporters, as providers a TaskClient or TaskServer takes. */
function inMemoryTelemetry() {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  return { spans, tracerProvider, metricExporter, reader, meterProvider };
}

describe('client telemetry', () => {
  it('puts the call, its polls, the input handler and the close-out in one trace with the server’s spans', async () => {
    const { spans, tracerProvider, metricExporter, reader, meterProvider } = inMemoryTelemetry();
    const telemetry = { tracerProvider, meterProvider };
    server = await startTestServer(
      (tasks) =>
        tasks.registerTool(
          'ask',
          { inputSchema: z.object({ secret: z.string() }), task: { support: 'required' } },
          async ({ secret }, ctx) => {
            const answer = await ctx.input('note', {
              method: 'elicitation/create',
              params: {
                mode: 'form',
                message: 'A note?',
                requestedSchema: { type: 'object', properties: { note: { type: 'string' } } },
              },
            });
            const note = (answer['content'] as { note?: string } | undefined)?.note ?? '';
            return { content: [{ type: 'text', text: `${SECRET_RESULT} ${secret.length} ${note.length}` }] };
          },
        ),
      { server: { telemetry } },
    );
    dir = mkdtempSync(join(tmpdir(), 'closeout-client-telemetry-'));
    client = await connectHttpTaskClient(server.url, {
      ledger: join(dir, 'ledger.db'),
      pollPolicy: { floorMs: 5, capMs: 100, defaultIntervalMs: 20, jitterRatio: 0.1 },
      telemetry,
      // this test pins the poll spans: following by push (the default) sends no tasks/get while the stream is up
      push: { enabled: false },
      inputHandlers: { elicitation: () => ({ action: 'accept', content: { note: SECRET_ANSWER } }) },
    });
    const handle = await client.callTool('ask', { secret: SECRET_ARGUMENT });
    if (!isTaskHandle(handle)) throw new Error('ask answered without a task');
    const result = await handle.result();
    expect(JSON.stringify(result)).toContain(SECRET_RESULT);

    const finished = spans.getFinishedSpans();
    const named = (name: string) => finished.filter((s) => s.name === name);
    const call = named('call ask')[0]!; // the submission: the span the ledger keeps with the record
    const clientCall = named('tools/call ask').find((s) => s.kind === 2)!; // SpanKind.CLIENT
    const serverCall = named('tools/call ask').find((s) => s.kind === 1)!; // SpanKind.SERVER
    const traceId = call.spanContext().traceId;
    expect(clientCall.spanContext().traceId).toBe(traceId);
    expect(clientCall.parentSpanContext?.spanId).toBe(call.spanContext().spanId);
    expect(clientCall.attributes).toMatchObject({ 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'ask' });
    // the server continued the client's trace from _meta.traceparent
    expect(serverCall.spanContext().traceId).toBe(traceId);
    expect(serverCall.parentSpanContext?.spanId).toBe(clientCall.spanContext().spanId);
    const run = named('task.run ask')[0]!;
    expect(run.spanContext().traceId).toBe(traceId);
    // every poll, the input handler, the tasks/update (and the server's side of them) and the close-out: same trace
    const polls = named('tasks/get').filter((s) => s.kind === 2);
    expect(polls.length).toBeGreaterThan(0);
    for (const poll of polls) expect(poll.parentSpanContext?.spanId).toBe(call.spanContext().spanId);
    const serverPolls = named('tasks/get').filter((s) => s.kind === 1);
    expect(serverPolls.every((s) => s.spanContext().traceId === traceId)).toBe(true);
    expect(named('input elicitation/create')[0]?.spanContext().traceId).toBe(traceId);
    expect(named('input elicitation/create')[0]?.attributes['closeout.task.input.key']).toBe('note');
    const updates = named('tasks/update');
    expect(updates.map((s) => s.kind).sort()).toEqual([1, 2]);
    expect(updates.every((s) => s.spanContext().traceId === traceId)).toBe(true);
    const closeout = named('closeout')[0]!;
    expect(closeout.spanContext().traceId).toBe(traceId);
    expect(closeout.attributes).toMatchObject({
      'closeout.record.local_state': 'terminal',
      'closeout.task.status': 'completed',
    });

    metricExporter.reset();
    await reader.forceFlush();
    const metrics = metricExporter
      .getMetrics()
      .flatMap((r) => r.scopeMetrics)
      .filter((s) => s.scope.name === 'closeout/client')
      .flatMap((s) => s.metrics);
    const sum = (name: string) =>
      metrics
        .filter((m) => m.descriptor.name === name)
        .flatMap((m) => m.dataPoints as Array<{ value: number | { count: number } }>)
        .reduce((n, p) => n + (typeof p.value === 'number' ? p.value : p.value.count), 0);
    expect(sum('closeout.client.polls')).toBe(polls.length);
    expect(sum('closeout.client.poll.errors')).toBe(0);
    expect(sum('closeout.client.closeouts')).toBe(1);
    expect(sum('closeout.client.closeout.lateness')).toBe(1);
    expect(sum('closeout.client.unknown_outcomes')).toBe(0);
    // the record is closed out: no open record of any local state
    expect(sum('closeout.client.records.open')).toBe(0);
    expect(metrics.some((m) => m.descriptor.name === 'closeout.client.records.open')).toBe(true);

    const everything = JSON.stringify({
      spans: finished.map((s) => ({ name: s.name, attributes: s.attributes, events: s.events })),
      metrics: metricExporter.getMetrics(),
    });
    for (const secret of [SECRET_ARGUMENT, SECRET_ANSWER, SECRET_RESULT]) expect(everything).not.toContain(secret);
  });

  it('forwards the caller’s W3C baggage on every request about the task, and the server restores it for the run', async () => {
    // invariant: spec 2026-07-28, basic/index: `baggage` is reserved in _meta for W3C Baggage; the client keeps its
    // call's with the record (polls from the scheduler carry it), the server keeps it with the task
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CBaggagePropagator());
    try {
      const tracerProvider = new BasicTracerProvider({
        spanProcessors: [new SimpleSpanProcessor(new InMemorySpanExporter())],
      });
      const telemetry = { tracerProvider };
      server = await startTestServer(
        (tasks) =>
          tasks.registerTool('tenant', { inputSchema: z.object({}), task: { support: 'required' } }, async () => {
            // the run's context is restored from the task's stored trace context, not from the request
            const tenant = propagation.getBaggage(context.active())?.getEntry('tenant')?.value ?? 'none';
            await new Promise((resolve) => setTimeout(resolve, 300));
            return { content: [{ type: 'text', text: `tenant ${tenant}` }] };
          }),
        { server: { telemetry } },
      );
      dir = mkdtempSync(join(tmpdir(), 'closeout-client-baggage-'));
      const sent: Array<{ method: string; meta: Record<string, unknown> | undefined }> = [];
      const recording: typeof fetch = async (input, init) => {
        if (typeof init?.body === 'string') {
          const body = JSON.parse(init.body) as { method?: string; params?: { _meta?: Record<string, unknown> } };
          if (body.method) sent.push({ method: body.method, meta: body.params?._meta });
        }
        return fetch(input, init);
      };
      client = await connectHttpTaskClient(server.url, {
        ledger: join(dir, 'ledger.db'),
        pollPolicy: { floorMs: 5, capMs: 100, defaultIntervalMs: 20, jitterRatio: 0.1 },
        telemetry,
        push: { enabled: false },
        fetch: recording,
      });
      const baggage = propagation.createBaggage({ tenant: { value: 'acme' } });
      const handle = await context.with(propagation.setBaggage(context.active(), baggage), () =>
        client!.callTool('tenant', {}),
      );
      if (!isTaskHandle(handle)) throw new Error('tenant answered without a task');
      expect(JSON.stringify(await handle.result())).toContain('tenant acme');
      expect((await client.get(handle.recordId))?.traceContext?.baggage).toBe('tenant=acme');
      const calls = sent.filter((r) => r.method === 'tools/call');
      const polls = sent.filter((r) => r.method === 'tasks/get');
      expect(calls.length).toBe(1);
      expect(polls.length).toBeGreaterThan(0);
      for (const request of [...calls, ...polls]) expect(request.meta?.['baggage']).toBe('tenant=acme');
    } finally {
      propagation.disable();
      context.disable();
    }
  });

  it('puts every notifications/tasks it handles in the call’s trace, one span each, like a poll', async () => {
    const { spans, tracerProvider, metricExporter, reader, meterProvider } = inMemoryTelemetry();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    server = await startTestServer((tasks) =>
      // a poll interval no test waits for: the task is closed out by its notification
      tasks.registerTool('gated', { task: { support: 'required', pollIntervalMs: 60_000 } }, async () => {
        await gate;
        return { content: [{ type: 'text', text: 'done' }] };
      }),
    );
    dir = mkdtempSync(join(tmpdir(), 'closeout-client-push-telemetry-'));
    client = await connectHttpTaskClient(server.url, {
      ledger: join(dir, 'ledger.db'),
      telemetry: { tracerProvider, meterProvider },
    });
    const handle = await client.callTool('gated', {});
    if (!isTaskHandle(handle)) throw new Error('gated answered without a task');
    const deadline = Date.now() + 20_000;
    while (client.pushState().mode !== 'push' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(client.pushState().mode).toBe('push');
    release();
    await handle.result();
    // the result resolves while the completing notification is handled; its span ends right after
    const completedBy = Date.now() + 10_000;
    const statuses = () =>
      spans
        .getFinishedSpans()
        .filter((span) => span.name === 'notifications/tasks')
        .map((span) => span.attributes['closeout.task.status']);
    while (!statuses().includes('completed') && Date.now() < completedBy) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }

    const finished = spans.getFinishedSpans();
    const call = finished.find((span) => span.name === 'call gated')!;
    const notified = finished.filter((span) => span.name === 'notifications/tasks');
    expect(notified.length).toBeGreaterThan(0);
    for (const span of notified) {
      expect(span.kind).toBe(4); // SpanKind.CONSUMER
      expect(span.spanContext().traceId).toBe(call.spanContext().traceId);
      expect(span.parentSpanContext?.spanId).toBe(call.spanContext().spanId);
      expect(span.attributes).toMatchObject({
        'mcp.method.name': 'notifications/tasks',
        'closeout.task.id': handle.taskId,
      });
    }
    expect(notified.map((span) => span.attributes['closeout.task.status'])).toContain('completed');
    expect(finished.filter((span) => span.name === 'tasks/get' && span.kind === 2)).toEqual([]);

    await reader.forceFlush();
    const points = metricExporter
      .getMetrics()
      .flatMap((r) => r.scopeMetrics)
      .flatMap((s) => s.metrics)
      .filter((m) => m.descriptor.name === 'closeout.client.notifications')
      .flatMap((m) => m.dataPoints as Array<{ value: number }>);
    expect(points.reduce((n, p) => n + p.value, 0)).toBe(notified.length);
  });
});
