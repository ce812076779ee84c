/**
 * What a push stream holds for a consumer that does not read is bounded, whatever the tasks' results weigh
 * (docs/operations.md, "Limits"): one principal with 200 completed tasks of 1 MiB results opens 8
 * `subscriptions/listen` streams for all of them over raw sockets and reads nothing. The server, its heap capped at
 * 768 MB, stays well under that (it used to read every row for every stream and queue every state at once, and died
 * of heap exhaustion), and keeps answering; a consumer that does read gets the state of every one of the 200 tasks.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { listen } from '../support/listen.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc, wireRequest } from '../support/rpc.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/bigResultServer.mjs', import.meta.url));
const TASKS = 200;

let dir: string;
let server: ServeProcess;
const taskIds: string[] = [];
const sockets: Socket[] = [];

function rssMb(pid: number): number {
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb) / 1024;
}

/** Sends a listen for `ids` on a socket of its own and never reads its answer. */
function silentListen(url: string, ids: string[]): Socket {
  const target = new URL(url);
  const { body, headers } = wireRequest('subscriptions/listen', { notifications: { taskIds: ids } });
  const socket = connect(Number(target.port), target.hostname);
  socket.pause();
  const lines = [
    `POST ${target.pathname} HTTP/1.1`,
    `host: ${target.host}`,
    `content-length: ${Buffer.byteLength(body)}`,
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  socket.write(`${lines.join('\r\n')}\r\n\r\n${body}`);
  socket.on('error', () => {});
  sockets.push(socket);
  return socket;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-push-memory-'));
  server = await startServe([], 30_000, {}, () => [
    process.execPath,
    '--max-old-space-size=768',
    FIXTURE,
    join(dir, 'server.db'),
  ]);
  for (let i = 0; i < TASKS; i++) {
    const created = await rpc(
      server.url,
      'tools/call',
      { name: 'big', arguments: { kib: 1024 } },
      { timeoutMs: 30_000 },
    );
    const taskId = (created.result?.['task'] as { taskId?: string } | undefined)?.taskId ?? created.result?.['taskId'];
    expect(typeof taskId, JSON.stringify(created).slice(0, 300)).toBe('string');
    taskIds.push(taskId as string);
  }
  // the last task created has completed: all have (the tool answers at once, in order of creation)
  for (let tries = 0; ; tries++) {
    const got = await rpc(server.url, 'tasks/get', { taskId: taskIds.at(-1) }, { timeoutMs: 30_000 });
    if (got.result?.['status'] === 'completed') break;
    expect(tries, JSON.stringify(got).slice(0, 300)).toBeLessThan(100);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}, 180_000);

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await server?.kill();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('push streams and consumers that do not read', () => {
  it('hold a bounded amount of memory, and the server keeps answering', async () => {
    const pid = server.child.pid!;
    const before = rssMb(pid);
    for (let i = 0; i < 8; i++) silentListen(server.url, taskIds);
    let peak = before;
    const until = Date.now() + 8_000;
    while (Date.now() < until && server.child.exitCode === null) {
      peak = Math.max(peak, rssMb(pid));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(server.child.exitCode, server.stderr()).toBeNull();
    expect(server.child.signalCode, server.stderr()).toBeNull();
    // 8 streams of 200 MiB of states each would be 1.6 GB: what is held must stay near the push buffer per stream
    expect(peak - before, `rss ${before.toFixed(0)} MB before, ${peak.toFixed(0)} MB at the peak`).toBeLessThan(300);
    const got = await rpc(server.url, 'tasks/get', { taskId: taskIds[0] }, { timeoutMs: 30_000 });
    expect(got.result?.['status']).toBe('completed');
  }, 60_000);

  it('gives a consumer that reads the state of every task it asked for', async () => {
    const stream = await listen(server.url, taskIds);
    try {
      expect(stream.httpStatus).toBe(200);
      const seen = new Set<string>();
      let from = 0;
      while (seen.size < TASKS) {
        const message = await stream.next((m) => m.method === 'notifications/tasks', from, 30_000);
        from = stream.messages.indexOf(message) + 1;
        expect(message.params?.['status']).toBe('completed');
        seen.add(message.params?.['taskId'] as string);
      }
      expect([...seen].sort()).toEqual([...taskIds].sort());
    } finally {
      stream.abort();
    }
  }, 120_000);
});
