// A client's trace outlives the client (docs/operations.md, "Observability"): a process calls a tool and is SIGKILLed while
// the task is working; another process resumes the record from the ledger, and its polls and close-out join the
// trace of the first process's call (the ledger keeps the call's trace context), instead of starting a new trace.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, describe, expect, it } from 'vitest';

import { connectHttpTaskClient, type TaskClient } from '../../src/client/index.js';
import { type ClientWorker, startClientWorker } from '../support/clientWorker.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-client-trace-'));
const PRELOAD = pathToFileURL(join(import.meta.dirname, '../support/otelSpansToFile.mjs')).href;
let server: ServeProcess | undefined;
let worker: ClientWorker | undefined;
let client: TaskClient | undefined;

afterAll(async () => {
  worker?.child.kill('SIGKILL');
  await client?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface SpanLine {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
}

describe('client trace across a client restart', () => {
  it('resumed polls and the close-out join the trace of the call a SIGKILLed process made', async () => {
    server = await startServe(['--store', join(dir, 'server.db')]);
    const ledger = join(dir, 'ledger.db');
    const spansFile = join(dir, 'first-client-spans.jsonl');
    worker = startClientWorker(
      {
        mode: 'call',
        url: server.url,
        ledger,
        askedLog: join(dir, 'asked.log'),
        tool: 'batch_job',
        args: { items: 15, stepMs: 200 },
        leaseMs: 1_000,
      },
      { NODE_OPTIONS: `--import=${PRELOAD}`, CLOSEOUT_TEST_SPANS_FILE: spansFile },
    );
    const { taskId } = await worker.next('handle', 30_000);
    worker.child.kill('SIGKILL');
    expect((await worker.exited).signal).toBe('SIGKILL');
    const firstSpans = readFileSync(spansFile, 'utf8')
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as SpanLine);
    // the call span ends once the handle is returned: written synchronously before the process was killed
    const call = firstSpans.find((span) => span.name === 'call batch_job');
    expect(call, JSON.stringify(firstSpans)).toBeDefined();
    expect(firstSpans.find((span) => span.name === 'tools/call batch_job')?.parentSpanId).toBe(call!.spanId);

    const spans = new InMemorySpanExporter();
    const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
    client = await connectHttpTaskClient(server.url, {
      ledger,
      telemetry: { tracerProvider },
      push: { enabled: false },
      pollPolicy: { floorMs: 20, defaultIntervalMs: 100, capMs: 500 },
    });
    // the dead process's lease is freed at once when the kernel proves it dead (src/shared/lease/leaseHolder.ts), else it runs out
    const deadline = Date.now() + 20_000;
    let report = await client.resumeAll();
    while (report.resumed.length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      report = await client.resumeAll();
    }
    expect(report.resumed.map((handle) => handle.taskId)).toEqual([taskId]);
    await report.resumed[0]!.result();

    const finished = spans.getFinishedSpans();
    const polls = finished.filter((span) => span.name === 'tasks/get');
    expect(polls.length).toBeGreaterThan(0);
    for (const poll of polls) {
      expect(poll.spanContext().traceId).toBe(call!.traceId);
      expect(poll.parentSpanContext?.spanId).toBe(call!.spanId);
    }
    const closeout = finished.find((span) => span.name === 'closeout');
    expect(closeout?.spanContext().traceId).toBe(call!.traceId);
    expect(closeout?.parentSpanContext?.spanId).toBe(call!.spanId);
    expect(closeout?.attributes).toMatchObject({ 'closeout.task.id': taskId, 'closeout.task.status': 'completed' });
  });
});
