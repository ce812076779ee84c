/**
 * Benchmark 1 (bench/RESULTS.md section 1): what a task handle costs on the server. Throughput and p50/p99 latency over
 * loopback HTTP, a fixed number of requests at a fixed concurrency, of
 *   floor  a bare node:http server answering the same JSON-RPC bytes as (a): the physical limit;
 *   a      a plain tools/call on an SDK McpServer without Closeout;
 *   b      the same tools/call on Closeout, answered with a CreateTaskResult (durable SQLite commit, then the handler
 *          runs and its result is committed too);
 *   c      tasks/get on a working task (SQLite), answered by the fast path (taskGetFastPath.ts);
 *   c.sdk  the same tasks/get with the fast path off: through the SDK's per-request server, as before the fast path;
 *   d.b    (b) on the PostgreSQL store;  d.c  (c) on the PostgreSQL store;
 *   e.b    (b) on a SQLite store whose WAL checkpoints run inside the serving thread's commits (SQLite's default),
 *          not in the store's background worker: what the worker buys;
 *   f.b    (b) on a SQLite store with `synchronous: 'normal'` (commits not synced to disk one by one): what the
 *          default's power-loss durability (every commit fsynced, docs/DESIGN.md rule 4) costs.
 *   g.b    (b) with the OpenTelemetry SDK recording every span and metric (docs/operations.md, "Observability"); (b) itself
 *          runs with no SDK registered, telemetry off; g.c  likewise for (c).
 * Every scenario runs once per round, in an order rotated each round; the table shows medians over rounds, and each
 * ratio is the median of the ratios measured within one round (the machine is noisy; both sides of a ratio saw the
 * same noise). Targets: b/a >= 0.7 and c/a >= 2 in throughput, and c's server CPU per request at most 0.35x a's
 * (a poll near the floor: bench/RESULTS.md section 12).
 *
 *   node dist/bench/bench/serverOverhead.js [--smoke] [--rounds 5] [--requests 3000] [--concurrency 16]
 *     [--only floor,a,b,c,c.sdk,d.b,d.c,e.b,f.b,g.b,g.c] [--skip-postgres]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { SqliteTaskStore, type TaskServerOptions, type TaskStore } from 'closeout/server';

import { type WireRequest, wireRequest } from '../test/support/rpc.js';
import { fixed, machineLine, median, table } from './figures.js';
import { positive } from './flags.js';
import { type LoadResult, runLoad } from './loadGenerator.js';
import { openPostgresStore } from './postgresStore.js';
import {
  ECHO_ARGUMENTS,
  ECHO_TOOL,
  HOLD_TOOL,
  startCloseoutServer,
  startFloorServer,
  startPlainSdkServer,
} from './servers.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    requests: { type: 'string' },
    concurrency: { type: 'string' },
    only: { type: 'string' },
    'skip-postgres': { type: 'boolean', default: false },
  },
});
const rounds = positive(flags.rounds, flags.smoke ? 1 : 5);
const requests = positive(flags.requests, flags.smoke ? 50 : 2000);
const concurrency = positive(flags.concurrency, flags.smoke ? 4 : 16);
const warmup = flags.smoke ? 10 : Math.min(500, requests);
const deadlineMs = flags.smoke ? 20_000 : 180_000;
const only = flags.only?.split(',').map((s) => s.trim());

interface Scenario {
  key: string;
  label: string;
  url: string;
  request: WireRequest;
  expect: string;
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-overhead-'));
const cleanups: (() => Promise<void>)[] = [];
const wanted = (key: string) => !only || only.includes(key);

try {
  console.log(`serverOverhead · ${machineLine()}`);
  console.log(
    `${requests} requests per run after ${warmup} warm-up, ${concurrency} in flight, ${rounds} round(s), loopback HTTP`,
  );
  const scenarios: Scenario[] = [];
  const plainCall = wireRequest('tools/call', { name: ECHO_TOOL, arguments: ECHO_ARGUMENTS }, { declareTasks: false });
  const taskCall = wireRequest('tools/call', { name: ECHO_TOOL, arguments: ECHO_ARGUMENTS }, { declareTasks: true });

  const plain = await startPlainSdkServer();
  cleanups.push(plain.close);
  // the floor answers with exactly the bytes (a) answers with
  const sample = await fetch(plain.url, { method: 'POST', headers: plainCall.headers, body: plainCall.body });
  const sampleBody = await sample.text();
  if (!sampleBody.includes('"text":"hello"')) throw new Error(`plain SDK server answered ${sampleBody}`);
  const floor = await startFloorServer(sampleBody, sample.headers.get('content-type') ?? 'application/json');
  cleanups.push(floor.close);
  scenarios.push({
    key: 'floor',
    label: 'node:http echo of the same bytes',
    url: floor.url,
    request: plainCall,
    expect: '"text":"hello"',
  });
  scenarios.push({
    key: 'a',
    label: 'SDK tools/call, no Closeout',
    url: plain.url,
    request: plainCall,
    expect: '"text":"hello"',
  });

  const addCloseout = async (
    prefix: '' | 'd.' | 'e.' | 'f.' | 'g.' | 'sdk.',
    storeName: string,
    store: TaskStore,
    telemetry?: TaskServerOptions['telemetry'],
  ) => {
    const server = await startCloseoutServer(store, telemetry, { taskGetFastPath: prefix !== 'sdk.' });
    cleanups.push(async () => {
      await server.close();
      if (server.errors.length > 0)
        console.log(`${storeName} server reported ${server.errors.length} error(s): ${server.errors[0]!.message}`);
    });
    const hold = await fetch(server.url, {
      method: 'POST',
      ...wireRequest('tools/call', { name: HOLD_TOOL, arguments: {} }, { declareTasks: true }),
    });
    const created = /"taskId":"([^"]+)"/.exec(await hold.text());
    if (!created) throw new Error(`${storeName}: creating the working task failed`);
    const getRow = {
      key: prefix === 'sdk.' ? 'c.sdk' : `${prefix}c`,
      label: `tasks/get on a working task (${storeName})`,
      url: server.url,
      request: wireRequest('tasks/get', { taskId: created[1] }, { declareTasks: true }),
      expect: '"status":"working"',
    };
    // sdk: only the tasks/get, through the SDK's per-request server, beside the fast path's (c)
    if (prefix === 'sdk.') {
      scenarios.push(getRow);
      return;
    }
    scenarios.push({
      key: `${prefix}b`,
      label: `tools/call -> CreateTaskResult (${storeName})`,
      url: server.url,
      request: taskCall,
      expect: '"resultType":"task"',
    });
    // e, f: only the create, to show what the background checkpoints buy and what synced commits cost
    if (prefix === 'e.' || prefix === 'f.') return;
    scenarios.push(getRow);
  };

  const sqlite = new SqliteTaskStore(join(dir, 'tasks.db'));
  cleanups.push(() => sqlite.close());
  await addCloseout('', 'SQLite', sqlite);
  if (wanted('c.sdk')) {
    const sdkPath = new SqliteTaskStore(join(dir, 'tasks-sdk-path.db'));
    cleanups.push(() => sdkPath.close());
    await addCloseout('sdk.', 'SQLite, fast path off', sdkPath);
  }
  if (wanted('e.b')) {
    // the same store with SQLite's automatic checkpoint inside the commits of the serving thread, SQLite's default
    const inline = new SqliteTaskStore(join(dir, 'tasks-inline.db'), { backgroundCheckpoints: false });
    cleanups.push(() => inline.close());
    await addCloseout('e.', 'SQLite, checkpoints inline', inline);
  }
  if (wanted('f.b')) {
    // the explicit faster choice: commits reach the disk at checkpoints, not one by one
    const unsynced = new SqliteTaskStore(join(dir, 'tasks-normal.db'), { synchronous: 'normal' });
    cleanups.push(() => unsynced.close());
    await addCloseout('f.', "SQLite, synchronous 'normal'", unsynced);
  }

  if (wanted('g.b') || wanted('g.c')) {
    // telemetry on: an SDK that records every span (batched to an exporter that drops them) and every metric
    const exporter = {
      export: (_spans: unknown[], done: (r: { code: 0 }) => void) => done({ code: 0 }),
      shutdown: async () => {},
    };
    const tracerProvider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter)] });
    const reader = new PeriodicExportingMetricReader({
      exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
      exportIntervalMillis: 1000,
    });
    const meterProvider = new MeterProvider({ readers: [reader] });
    cleanups.push(async () => {
      await Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]);
    });
    const traced = new SqliteTaskStore(join(dir, 'tasks-traced.db'));
    cleanups.push(() => traced.close());
    await addCloseout('g.', 'SQLite, telemetry on', traced, { tracerProvider, meterProvider });
  }

  let postgresNote: string | undefined;
  if (flags['skip-postgres']) postgresNote = 'd skipped: --skip-postgres';
  else if (!wanted('d.b') && !wanted('d.c')) postgresNote = undefined;
  else {
    const opened = await openPostgresStore();
    if ('skipped' in opened) postgresNote = `d skipped: ${opened.skipped}`;
    else {
      cleanups.push(opened.close);
      await addCloseout('d.', 'PostgreSQL', opened.store);
    }
  }

  const chosen = scenarios.filter((s) => wanted(s.key));
  const results = new Map<string, LoadResult[]>(chosen.map((s) => [s.key, []]));
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < chosen.length; i++) {
      const scenario = chosen[(i + round) % chosen.length]!;
      const result = await runLoad({
        url: scenario.url,
        request: scenario.request,
        concurrency,
        requests,
        warmup,
        expect: scenario.expect,
        deadlineMs,
      });
      if (result.failures > 0) {
        throw new Error(`${scenario.key}: ${result.failures} unexpected responses, first: ${result.firstFailure}`);
      }
      results.get(scenario.key)!.push(result);
    }
  }

  const rows = chosen.map((s) => {
    const runs = results.get(s.key)!;
    return [
      s.key,
      s.label,
      fixed(median(runs.map((r) => r.throughput))),
      fixed(median(runs.map((r) => r.p50Ms)), 2),
      fixed(median(runs.map((r) => r.p99Ms)), 2),
      fixed(median(runs.map((r) => r.serverCpuUsPerRequest))),
    ];
  });
  console.log('');
  console.log(table(['id', 'scenario', 'req/s', 'p50 ms', 'p99 ms', 'server CPU µs/req'], rows));
  if (postgresNote) console.log(postgresNote);

  // each ratio is taken within a round, then the median over rounds; the CPU ratio (server CPU per request of the
  // bottom over the top) is what the throughput ratio would be if the server were the only thing using its core
  const ratio = (top: string, bottom: string, of: (r: LoadResult) => number) => {
    const x = results.get(top);
    const y = results.get(bottom);
    if (!x || !y) return Number.NaN;
    return median(x.map((r, i) => of(r) / of(y[i]!)));
  };
  const ratios: [string, string, string, number | undefined][] = [
    ['b/a', 'b', 'a', 0.7],
    ['c/a', 'c', 'a', 2],
    ['c.sdk/a', 'c.sdk', 'a', undefined],
    ['c/c.sdk', 'c', 'c.sdk', undefined],
    ['d.b/a', 'd.b', 'a', undefined],
    ['d.c/a', 'd.c', 'a', undefined],
    ['e.b/a', 'e.b', 'a', undefined],
    ['f.b/a', 'f.b', 'a', undefined],
    ['b/f.b', 'b', 'f.b', undefined],
    ['g.b/b', 'g.b', 'b', undefined],
    ['g.c/c', 'g.c', 'c', undefined],
    ['a/floor', 'a', 'floor', undefined],
  ];
  console.log('');
  console.log(
    table(
      ['ratio', 'throughput', 'by server CPU', 'target (throughput)'],
      ratios
        .filter(([, top, bottom]) => results.has(top) && results.has(bottom))
        .map(([name, top, bottom, target]) => {
          const throughput = ratio(top, bottom, (r) => r.throughput);
          const cpu = ratio(bottom, top, (r) => r.serverCpuUsPerRequest);
          const verdict = target === undefined ? '' : `>= ${target} ${throughput >= target ? 'met' : 'NOT MET'}`;
          return [name, fixed(throughput, 2), fixed(cpu, 2), verdict];
        }),
    ),
  );
  if (results.has('a') && results.has('c')) {
    // the fast path's CPU target (bench/RESULTS.md section 12), the other way round from the table's column: what one
    // tasks/get costs per tools/call
    const cpu = ratio('c', 'a', (r) => r.serverCpuUsPerRequest);
    const verdict = cpu <= 0.35 ? 'met' : 'NOT MET';
    console.log('');
    console.log(`tasks/get fast path: server CPU per request c/a = ${fixed(cpu, 2)} (target <= 0.35 ${verdict})`);
  }
} finally {
  for (const cleanup of cleanups.reverse()) await cleanup().catch((error: unknown) => console.error(String(error)));
  rmSync(dir, { recursive: true, force: true });
}
