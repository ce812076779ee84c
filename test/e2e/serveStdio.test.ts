// `closeout serve --stdio` (docs/server.md, "Serving over stdio"): a task server a host starts as a process, over real pipes.
// Tasks, input and results flow as over HTTP; stdout carries JSON-RPC only; a host that closes stdin ends the server
// cleanly, and the next process on the same store takes its unfinished tasks up; without --store the store is a file
// in the user's own ~/.closeout, whatever the working directory.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import type { CallToolResult } from '@modelcontextprotocol/client';
import { afterAll, describe, expect, it, vi } from 'vitest';

import type { TaskClient } from '../../src/client/index.js';
import { connectStdioTaskClient, isTaskHandle } from '../../src/client/index.js';
import { CLI } from '../support/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-serve-stdio-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const POLL = { floorMs: 10, defaultIntervalMs: 50, capMs: 300 };
const textOf = (result: CallToolResult) => (result.content[0] as { text: string }).text;

function client(store: string, ledger: string, env: Record<string, string> = {}): Promise<TaskClient> {
  return connectStdioTaskClient(
    {
      command: process.execPath,
      args: [CLI, 'serve', '--stdio', '--store', store, '--lease-ms', '2000'],
      env: { ...(process.env as Record<string, string>), ...env },
      stderr: 'ignore',
    },
    {
      ledger,
      pollPolicy: POLL,
      inputHandlers: { elicitation: () => ({ action: 'accept', content: { approve: true, note: 'over stdio' } }) },
    },
  );
}

describe('closeout serve --stdio', { timeout: 90_000 }, () => {
  it('serves tasks, input and results to a client over real pipes', async () => {
    const tasks = await client(join(dir, 'a.db'), join(dir, 'a-ledger.db'));
    try {
      const batch = await tasks.callTool('batch_job', { items: 3, stepMs: 50 });
      if (!isTaskHandle(batch)) throw new Error('batch_job answered without a task');
      expect(textOf(await batch.result())).toBe('Processed 3 items');
      const deploy = await tasks.callTool('approve_deploy', { env: 'qa' });
      if (!isTaskHandle(deploy)) throw new Error('approve_deploy answered without a task');
      expect(textOf(await deploy.result())).toContain('Deployed to qa (over stdio)');
    } finally {
      await tasks.close();
    }
  });

  it('pushes task status on subscriptions/listen over the one channel: a client that polls every 30 s closes out in seconds', async () => {
    const tasks = await connectStdioTaskClient(
      { command: process.execPath, args: [CLI, 'serve', '--stdio', '--store', join(dir, 'push.db')], stderr: 'ignore' },
      // no poll sooner than 30 s apart, so an early close-out can only have come by push
      {
        ledger: join(dir, 'push-ledger.db'),
        pollPolicy: { floorMs: 30_000, defaultIntervalMs: 30_000, capMs: 30_000 },
      },
    );
    try {
      const started = Date.now();
      const batch = await tasks.callTool('batch_job', { items: 4, stepMs: 500 });
      if (!isTaskHandle(batch)) throw new Error('batch_job answered without a task');
      const messages: string[] = [];
      batch.onChange((record) => record.statusMessage && messages.push(record.statusMessage));
      await vi.waitFor(() => expect(tasks.pushState().mode).toBe('push'), { timeout: 10_000, interval: 50 });
      expect(textOf(await batch.result())).toBe('Processed 4 items');
      expect(Date.now() - started).toBeLessThan(20_000);
      // the progress on the way came by push too
      expect(messages.some((message) => /Processed \d of 4 items/.test(message))).toBe(true);
    } finally {
      await tasks.close();
    }
  });

  it('ends cleanly when the host closes stdin, and the next process takes the unfinished task up', async () => {
    const store = join(dir, 'b.db');
    const ledger = join(dir, 'b-ledger.db');
    const first = await client(store, ledger);
    const batch = await first.callTool('batch_job', { items: 40, stepMs: 100 });
    if (!isTaskHandle(batch)) throw new Error('batch_job answered without a task');
    await new Promise((resolve) => setTimeout(resolve, 600));
    await first.close(); // the host goes away: stdin closes, the server ends and hands its task back
    const second = await client(store, ledger);
    try {
      const { resumed } = await second.resumeAll();
      expect(resumed.map((handle) => handle.taskId)).toEqual([batch.taskId]);
      const result = await resumed[0]!.result();
      expect(result.structuredContent).toMatchObject({ processed: 40, attempt: 2 });
    } finally {
      await second.close();
    }
  });

  it('writes nothing but JSON-RPC on stdout, keeps its store in ~/.closeout, and says where on stderr', async () => {
    const home = join(dir, 'home');
    const elsewhere = join(dir, 'cwd');
    mkdirSync(home);
    mkdirSync(elsewhere);
    const child = spawn(process.execPath, [CLI, 'serve', '--stdio'], {
      cwd: elsewhere,
      env: { ...process.env, HOME: home },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const lines: string[] = [];
    createInterface({ input: child.stdout }).on('line', (line) => lines.push(line));
    const send = (message: Record<string, unknown>) => child.stdin.write(`${JSON.stringify(message)}\n`);
    const answered = (id: number) =>
      new Promise<void>((resolve, reject) => {
        const timer = setInterval(() => {
          if (lines.some((line) => line.includes(`"id":${id}`))) {
            clearInterval(timer);
            resolve();
          }
        }, 20);
        setTimeout(() => {
          clearInterval(timer);
          reject(new Error(`no answer to ${id}: ${stderr}`));
        }, 20_000);
      });
    send({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'host', version: '1' } },
    });
    await answered(1);
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    send({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} });
    await answered(2);
    child.stdin.end(); // the host closes the pipe: the server ends by itself
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code).toBe(0);
    for (const line of lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: '2.0' });
    expect(lines.join('\n')).toContain('batch_job');
    const store = join(home, '.closeout', 'server.db');
    expect(existsSync(store)).toBe(true);
    expect(existsSync(join(elsewhere, 'closeout-server.db'))).toBe(false);
    expect(stderr).toContain(`store ${store}`);
  });
});

describe('closeout serve --stdio when its host dies mid-write', { timeout: 60_000 }, () => {
  // A host that dies closes both pipes at once; the server may see its stdout break (EPIPE) before its stdin ends.
  // Either way the connection is over: the server must end and hand its running task back, not run on as an orphan.
  it('ends when stdout breaks, with stdin still open, and hands its running task back', async () => {
    const store = join(dir, 'broken-stdout.db');
    const child = spawn(process.execPath, [CLI, 'serve', '--stdio', '--store', store], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    const lines: string[] = [];
    createInterface({ input: child.stdout }).on('line', (line) => lines.push(line));
    const meta = {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientInfo': { name: 'host', version: '1' },
      'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
    };
    const send = (id: number, method: string, params: Record<string, unknown>) =>
      child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } })}\n`);
    send(1, 'tools/call', { name: 'batch_job', arguments: { items: 200, stepMs: 100 } });
    await vi.waitFor(() => expect(lines.join('\n')).toContain('"id":1'), { timeout: 20_000 });
    expect(lines.join('\n')).toMatch(/"taskId"/);
    await vi.waitFor(() => expect(stderr).toContain('created (batch_job)'), { timeout: 5_000 });
    // the host's end of stdout goes away; stdin stays open, so only the failed write can tell the server
    child.stdout.destroy();
    send(2, 'tools/list', {});
    const timeout = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const [code, signal] = await exited;
    clearTimeout(timeout);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(stderr).toContain('stopped, 1 running task handed back to the store');
    child.stdin.destroy();
  });
});
