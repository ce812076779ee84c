/**
 * Open-loop `tasks/get` over loopback HTTP at a fixed rate, in a child process of its own: what a poller sees while the
 * server does something else (renews thousands of leases, sweeps a large table). Unlike `loadGenerator.ts` (closed
 * loop, as fast as the server answers) a request is sent on schedule whether or not the last one came back, so a
 * stalled server shows as latency, not as fewer requests; and the rate is low enough that the load itself is not
 * what is measured. Requests cycle over the given task ids; every answer must carry a task status.
 */
import { spawn } from 'node:child_process';
import { Agent, request as httpRequest } from 'node:http';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

import { wireRequest } from '../test/support/rpc.js';
import { percentile } from './figures.js';

export interface PacedSpec {
  url: string;
  taskIds: string[];
  /** Requests per second, sent on a fixed schedule. */
  rate: number;
  /** How long to send for. */
  seconds: number;
}

export interface PacedResult {
  requests: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  failures: number;
  firstFailure?: string;
}

const SELF = fileURLToPath(import.meta.url);

/** Runs the paced load in a child process; resolves when it has sent for `seconds` and every answer is back. */
export async function runPacedGets(spec: PacedSpec): Promise<PacedResult> {
  const child = spawn(process.execPath, [SELF], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdin.end(JSON.stringify(spec));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const last = stdout.trim().split('\n').at(-1) ?? '';
  if (code !== 0 || !last.startsWith('{')) throw new Error(`paced gets exited with ${code}: ${stderr.trim()}`);
  return JSON.parse(last) as PacedResult;
}

// ---- the child side ------------------------------------------------------------------------------------------------

async function generate(spec: PacedSpec): Promise<void> {
  const url = new URL(spec.url);
  const requests = spec.taskIds.map((taskId) => {
    const wire = wireRequest('tasks/get', { taskId }, { declareTasks: true });
    const body = Buffer.from(wire.body);
    return { body, headers: { ...wire.headers, 'content-length': String(body.length) } };
  });
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const total = Math.max(1, Math.round(spec.rate * spec.seconds));
  const latencies = new Float64Array(total);
  let failures = 0;
  let firstFailure: string | undefined;

  const send = (i: number) =>
    new Promise<void>((resolve) => {
      const { body, headers } = requests[i % requests.length]!;
      const start = performance.now();
      const fail = (why: string) => {
        failures++;
        firstFailure ??= why;
      };
      const req = httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers, agent },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('error', (error) => (fail(error.message), resolve()));
          res.on('end', () => {
            latencies[i] = performance.now() - start;
            const text = Buffer.concat(chunks).toString();
            if (res.statusCode !== 200 || !text.includes('"status":"'))
              fail(`HTTP ${res.statusCode}: ${text.slice(0, 300)}`);
            resolve();
          });
        },
      );
      req.setTimeout(60_000, () => req.destroy(new Error('no answer in 60 s')));
      req.on('error', (error) => (fail(error.message), resolve()));
      req.end(body);
    });

  // on schedule: request i leaves at i / rate seconds from the start, whatever happened to the others
  const begin = performance.now();
  const inFlight: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const due = begin + (i * 1000) / spec.rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
    inFlight.push(send(i));
  }
  await Promise.all(inFlight);
  agent.destroy();
  const sorted = latencies.sort();
  process.stdout.write(
    `${JSON.stringify({
      requests: total,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      maxMs: sorted[sorted.length - 1] ?? Number.NaN,
      failures,
      ...(firstFailure !== undefined && { firstFailure }),
    })}\n`,
  );
}

if (process.argv[1] === SELF) {
  let input = '';
  process.stdin.on('data', (chunk: Buffer) => (input += chunk.toString()));
  process.stdin.on('end', () => {
    generate(JSON.parse(input) as PacedSpec).catch((error: unknown) => {
      console.error(error instanceof Error ? error.message : String(error));
      process.exitCode = 1;
    });
  });
}
