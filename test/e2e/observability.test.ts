// Observability of a real `closeout serve` (docs/operations.md, "Observability"): a resumable task's trace survives a SIGKILL of
// its server (attempt 2, on the restarted process, is a span in the trace of the call that created the task), and
// `--metrics-port` serves the server's metrics in the Prometheus text format on loopback.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { afterAll, describe, expect, it } from 'vitest';

import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-observability-'));
const live: ServeProcess[] = [];
const PRELOAD = pathToFileURL(join(import.meta.dirname, '../support/otelSpansToFile.mjs')).href;
const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

afterAll(async () => {
  await Promise.all(live.map((p) => p.stop()));
  rmSync(dir, { recursive: true, force: true });
});

interface SpanLine {
  pid: number;
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: Record<string, unknown>;
  events: Array<{ name: string; attributes?: Record<string, unknown> }>;
}

function spansIn(file: string): SpanLine[] {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as SpanLine);
}

async function status(url: string, taskId: string) {
  const r = await rpc(url, 'tasks/get', { taskId });
  expect(r.error).toBeUndefined();
  return r.result!;
}

describe('closeout serve observability', () => {
  it('keeps a resumable task in its caller’s trace across a SIGKILL and the re-run', async () => {
    const store = join(dir, 'traced.db');
    const spansFile = join(dir, 'spans.jsonl');
    const env = { NODE_OPTIONS: `--import=${PRELOAD}`, CLOSEOUT_TEST_SPANS_FILE: spansFile };
    const serve = async () => {
      const p = await startServe(['--store', store, '--lease-ms', '2000'], 15_000, env);
      live.push(p);
      return p;
    };
    const first = await serve();
    const created = await rpc(
      first.url,
      'tools/call',
      { name: 'batch_job', arguments: { items: 30, stepMs: 100 } },
      { meta: { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` } },
    );
    expect(created.result?.['resultType']).toBe('task');
    const taskId = created.result!['taskId'] as string;
    await waitFor('the batch to be under way', async () =>
      String((await status(first.url, taskId))['statusMessage'] ?? '').startsWith('Processed') ? true : undefined,
    );
    await first.kill();

    const second = await serve();
    await waitFor(
      'the re-run to complete',
      async () => ((await status(second.url, taskId))['status'] === 'completed' ? true : undefined),
      30_000,
      100,
    );
    const spans = await waitFor('the second run’s span', async () => {
      const all = spansIn(spansFile);
      return all.some((s) => s.name === 'task.run batch_job' && s.pid === second.child.pid) ? all : undefined;
    });

    const call = spans.find((s) => s.name === 'tools/call batch_job')!;
    expect(call).toMatchObject({
      pid: first.child.pid,
      traceId: CALLER_TRACE,
      parentSpanId: CALLER_SPAN,
      attributes: { 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'batch_job', 'closeout.task.id': taskId },
    });
    // attempt 1 died with its process (its span never ended); attempt 2 ran in the restarted one, in the same trace
    const rerun = spans.find((s) => s.name === 'task.run batch_job')!;
    expect(rerun).toMatchObject({
      pid: second.child.pid,
      traceId: CALLER_TRACE,
      parentSpanId: call.spanId,
      attributes: { 'closeout.task.id': taskId, 'closeout.task.attempt': 2, 'closeout.task.status': 'completed' },
    });
    expect(rerun.events.some((e) => String(e.attributes?.['closeout.task.status_message']).startsWith('Processed')));
  }, 90_000);

  it('serves the metrics in the Prometheus text format on --metrics-port, on loopback by default', async () => {
    const p = await startServe(['--store', join(dir, 'metrics.db'), '--metrics-port', '0', '--service-name', 'orders']);
    live.push(p);
    const metricsUrl = await waitFor('the metrics URL', async () => /metrics at (http:\/\/\S+)/.exec(p.stderr())?.[1]);
    expect(new URL(metricsUrl).hostname).toBe('127.0.0.1');
    // one long task still running when the metrics are read, one short one finished by then
    const long = await rpc(p.url, 'tools/call', { name: 'export_report', arguments: { pages: 100, pageMs: 100 } });
    expect(long.result?.['resultType']).toBe('task');
    const created = await rpc(p.url, 'tools/call', { name: 'batch_job', arguments: { items: 2, stepMs: 10 } });
    const taskId = created.result!['taskId'] as string;
    await waitFor('the task to complete', async () =>
      (await status(p.url, taskId))['status'] === 'completed' ? true : undefined,
    );
    const scrape = await fetch(metricsUrl);
    expect(scrape.status).toBe(200);
    expect(scrape.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await scrape.text();
    const sample = (pattern: RegExp) => {
      const line = text.split('\n').find((l) => pattern.test(l));
      return line === undefined ? undefined : Number(line.split(' ').at(-1));
    };
    expect(sample(/^closeout_server_task_attempts_total\{.*gen_ai_tool_name="batch_job"/)).toBe(1);
    expect(sample(/^closeout_server_task_duration_count\{.*closeout_task_status="completed"/)).toBe(1);
    expect(sample(/^mcp_server_operation_duration_count\{.*mcp_method_name="tasks\/get"/)).toBeGreaterThan(0);
    expect(sample(/^closeout_server_store_operation_duration_count\{.*closeout_store_operation="create"/)).toBe(2);
    expect(text).toMatch(/# TYPE closeout_server_tasks_open gauge/);
    expect(
      sample(/^closeout_server_tasks_open\{(?=.*closeout_task_status="working")(?=.*gen_ai_tool_name="export_report")/),
    ).toBe(1);
    expect(sample(/^mcp_server_operation_duration_count\{.*mcp_method_name="tools\/call"/)).toBe(1);
    // the service as the operator named it (OpenTelemetry's target_info carries the resource)
    expect(text).toMatch(/^target_info\{[^}]*service_name="orders"/m);
    expect((await fetch(new URL('/other', metricsUrl))).status).toBe(404);
  }, 60_000);
});
