/**
 * Closed-loop HTTP load over loopback: `concurrency` requests in flight, a fixed count, every latency recorded.
 * It runs in a child process of its own so it never shares an event loop with the server it measures; the parent
 * samples the server's CPU time between the child's "warm" line (warm-up done) and its result.
 */
import { spawn } from 'node:child_process';
import { Agent, request as httpRequest } from 'node:http';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

import type { WireRequest } from '../test/support/rpc.js';
import { percentile } from './figures.js';

export interface LoadSpec {
  url: string;
  request: WireRequest;
  concurrency: number;
  /** Measured requests, after `warmup` unmeasured ones. */
  requests: number;
  warmup: number;
  /** A substring every response body must contain (else it counts as a failure). */
  expect: string;
  /** The whole run (warm-up included) stops issuing requests after this long. */
  deadlineMs: number;
}

export interface LoadResult {
  requests: number;
  elapsedMs: number;
  throughput: number;
  p50Ms: number;
  p99Ms: number;
  failures: number;
  firstFailure?: string;
  /** CPU time (user + system) of the calling process while the measured requests ran, per request. */
  serverCpuUsPerRequest: number;
}

const SELF = fileURLToPath(import.meta.url);
const WARM = 'warm';

/** Runs one load in a child process and resolves with its figures. */
export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const child = spawn(process.execPath, [SELF, JSON.stringify(spec)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let cpuAtWarm: NodeJS.CpuUsage | undefined;
  let cpuAtEnd: NodeJS.CpuUsage | undefined;
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (!cpuAtWarm && stdout.startsWith(`${WARM}\n`)) cpuAtWarm = process.cpuUsage();
    if (!cpuAtEnd && stdout.endsWith('}\n')) cpuAtEnd = process.cpuUsage(cpuAtWarm);
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const last = stdout.trim().split('\n').at(-1) ?? '';
  if (code !== 0 || !last.startsWith('{')) {
    throw new Error(`load generator exited with ${code}: ${stderr.trim() || stdout.trim()}`);
  }
  const result = JSON.parse(last) as Omit<LoadResult, 'serverCpuUsPerRequest'>;
  const cpu = cpuAtEnd ?? process.cpuUsage(cpuAtWarm);
  return { ...result, serverCpuUsPerRequest: (cpu.user + cpu.system) / result.requests };
}

// ---- the child side ------------------------------------------------------------------------------------------------

async function generate(spec: LoadSpec): Promise<void> {
  const url = new URL(spec.url);
  const body = Buffer.from(spec.request.body);
  const headers = { ...spec.request.headers, 'content-length': String(body.length) };
  const agent = new Agent({ keepAlive: true, maxSockets: spec.concurrency });
  const deadline = performance.now() + spec.deadlineMs;
  let failures = 0;
  let firstFailure: string | undefined;

  const send = () =>
    new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers, agent },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString();
            if (res.statusCode !== 200 || !text.includes(spec.expect)) {
              failures++;
              firstFailure ??= `HTTP ${res.statusCode}: ${text.slice(0, 300)}`;
            }
            resolve();
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });

  const phase = async (count: number, latencies?: Float64Array): Promise<number> => {
    let issued = 0;
    const worker = async () => {
      while (issued < count && performance.now() < deadline) {
        const i = issued++;
        const start = performance.now();
        await send();
        if (latencies) latencies[i] = performance.now() - start;
      }
    };
    await Promise.all(Array.from({ length: spec.concurrency }, worker));
    return issued;
  };

  await phase(spec.warmup);
  process.stdout.write(`${WARM}\n`);
  const latencies = new Float64Array(spec.requests);
  const start = performance.now();
  const done = await phase(spec.requests, latencies);
  const elapsedMs = performance.now() - start;
  agent.destroy();
  if (done < spec.requests) throw new Error(`deadline of ${spec.deadlineMs} ms hit after ${done} requests`);
  const sorted = latencies.sort();
  process.stdout.write(
    `${JSON.stringify({
      requests: done,
      elapsedMs,
      throughput: (done / elapsedMs) * 1000,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      failures,
      ...(firstFailure !== undefined && { firstFailure }),
    })}\n`,
  );
}

if (process.argv[1] === SELF) {
  generate(JSON.parse(process.argv[2] ?? '{}') as LoadSpec).catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : String(error));
    process.exitCode = 1;
  });
}
