// Invariant (RELIABILITY.md, "Client handles, close and connections"): a stdio server that dies mid-task is noticed
// at once and recorded on every task the client follows; connectStdioTaskClient spawns it again and one tasks/get per
// task picks the task up, so a durable server's task still closes out; a client that cannot reconnect surfaces the loss
// (handles settle as `disconnected`, leases handed back) instead of polling a closed transport until createdAt + ttlMs,
// or for ever. And connecting spawns the server once (same section; src/client/transport/sdkGlue.ts, point 5): no
// throwaway process (the SDK's version probe on a sibling) starts and so none takes over orphaned resumable tasks.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { TaskClientEvent, TaskHandle } from '../../src/client/index.js';
import { connectStdioTaskClient, isTaskHandle, SqliteLedger, TaskClient } from '../../src/client/index.js';
import { waitFor } from '../support/waitFor.js';

const SERVER = fileURLToPath(new URL('./fixtures/clientStdioTasksServer.mjs', import.meta.url));
const LEGACY = fileURLToPath(new URL('./fixtures/legacyStdioServer.mjs', import.meta.url));
const POLL = { floorMs: 5, defaultIntervalMs: 10, backoffBaseMs: 10, backoffCapMs: 200 };

let dir: string;
let env: Record<string, string>;
const cleanup: (() => Promise<unknown>)[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-stdio-restart-'));
  env = {
    ...(process.env as Record<string, string>),
    STDIO_FIXTURE_STATE: join(dir, 'server-state.json'),
    STDIO_FIXTURE_SPAWNS: join(dir, 'spawns.log'),
  };
});

afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

const spawned = (): number[] =>
  readFileSync(env['STDIO_FIXTURE_SPAWNS'] as string, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map(Number);

function within<T>(what: string, promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

async function resumableTask(client: TaskClient): Promise<TaskHandle> {
  const answer = await client.callTool('resumable');
  if (!isTaskHandle(answer)) throw new Error('resumable answered without a task');
  // the task is being followed: at least one tasks/get was answered
  await waitFor('a first poll', async () => ((await client.get(answer.taskId))?.lastPollAt ? true : undefined));
  return answer;
}

describe('a stdio server that dies mid-task', () => {
  it('is noticed, recorded, spawned again, and the task still closes out', async () => {
    const events: TaskClientEvent[] = [];
    const client = await connectStdioTaskClient(
      { command: process.execPath, args: [SERVER], env },
      { ledger: join(dir, 'ledger.db'), pollPolicy: POLL, onEvent: (event) => events.push(event) },
    );
    cleanup.push(() => client.close());
    const handle = await resumableTask(client);
    const first = spawned().at(-1) as number;
    process.kill(first, 'SIGKILL');

    const result = await within('the task', handle.result(), 20_000);
    expect(result.content[0]).toMatchObject({ text: 'resumable done after 2 attempts' }); // item 4: no throwaway run
    expect(spawned().at(-1)).not.toBe(first);
    const noticed = events.filter((event) => event.type === 'error' && event.recordId === handle.recordId);
    expect(noticed.map((event) => (event.type === 'error' ? event.error.message : ''))).toContainEqual(
      expect.stringMatching(/connection to the server closed/),
    );
    expect(await client.get(handle.taskId)).toMatchObject({ localState: 'terminal', status: 'completed' });
  });

  it('is surfaced when the client cannot reconnect: handles settle, leases go back, polling stops', async () => {
    const sdk = new Client({ name: 'app', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await sdk.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER], env }));
    cleanup.push(() => sdk.close());
    const ledger = new SqliteLedger(join(dir, 'ledger.db'));
    cleanup.push(() => ledger.dispose());
    const events: TaskClientEvent[] = [];
    const client = new TaskClient({
      client: sdk,
      ledger,
      endpoint: 'stdio:fixture',
      pollPolicy: POLL,
      onEvent: (event) => events.push(event),
    });
    cleanup.push(() => client.close());
    const handle = await resumableTask(client);
    process.kill(spawned().at(-1) as number, 'SIGKILL');

    await expect(within('the handle', handle.outcome(), 10_000)).rejects.toMatchObject({ code: 'disconnected' });
    const record = await client.get(handle.taskId);
    expect(record).toMatchObject({ localState: 'tracking', leaseHolder: undefined });
    expect(record?.lastError?.message).toMatch(/connection to the server closed/);
    const seen = events.length;
    await new Promise((resolve) => setTimeout(resolve, 500));
    // nothing polls the closed transport: no poll's error or status after it (the push follower may still say, once
    // the handles are gone, that no open task is left to follow)
    expect(events.slice(seen).filter((event) => event.type !== 'push')).toEqual([]);
  });
  it('does not keep close() waiting out the back-off between reconnect attempts', async () => {
    const sdk = new Client({ name: 'app', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await sdk.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER], env }));
    cleanup.push(() => sdk.close());
    const ledger = new SqliteLedger(join(dir, 'ledger.db'));
    cleanup.push(() => ledger.dispose());
    let attempts = 0;
    const client = new TaskClient({
      client: sdk,
      ledger,
      endpoint: 'stdio:fixture',
      pollPolicy: { ...POLL, backoffBaseMs: 30_000, backoffCapMs: 60_000 },
      reconnect: () => Promise.reject(new Error(`attempt ${(attempts += 1)} refused`)),
    });
    const handle = await resumableTask(client);
    process.kill(spawned().at(-1) as number, 'SIGKILL');
    await waitFor('a first reconnect attempt', () => (attempts > 0 ? true : undefined));
    const started = Date.now();
    await client.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(attempts).toBe(1);
    expect(await handle.outcome()).toMatchObject({ kind: 'detached', reason: 'client-closed' });
  });
});

describe('connecting to a stdio server', () => {
  it('spawns it once, so no throwaway process takes over an orphaned resumable task', async () => {
    const ledger = join(dir, 'ledger.db');
    const stdio = { command: process.execPath, args: [SERVER], env };
    const first = await connectStdioTaskClient(stdio, { ledger, pollPolicy: POLL });
    expect(spawned()).toHaveLength(1);
    const handle = await resumableTask(first);
    await first.close(); // the server process goes with it: the task is orphaned, still working
    expect(await handle.outcome()).toMatchObject({ kind: 'detached', reason: 'client-closed' });

    const second = await connectStdioTaskClient(stdio, { ledger, pollPolicy: POLL });
    cleanup.push(() => second.close());
    expect(spawned()).toHaveLength(2);
    const [resumed] = (await second.resumeAll()).resumed;
    const result = await within('the resumed task', (resumed as TaskHandle).result(), 20_000);
    expect(result.content[0]).toMatchObject({ text: 'resumable done after 2 attempts' });
  });

  it('still reaches a 2025-era server that exits on the probe, spawning it once more in the 2025 way', async () => {
    const client = await connectStdioTaskClient(
      { command: process.execPath, args: [LEGACY], env },
      { ledger: join(dir, 'ledger.db'), pollPolicy: POLL },
    );
    cleanup.push(() => client.close());
    const answer = await client.callTool('echo');
    expect(isTaskHandle(answer)).toBe(false);
    expect(spawned()).toHaveLength(2);
    expect(answer).toMatchObject({ content: [{ text: `legacy ${spawned().at(-1)}` }] });
  });
});
