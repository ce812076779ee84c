/**
 * `closeout bridge` over real pipes, with the SDK's stdio client in the role of a 2025-11-25 host (one that does not
 * speak the Tasks extension) and `closeout serve` upstream: a short task's result comes back inline, with progress
 * when the call carried a progress token and with none when it did not; a 20 s one answers with its task id, the
 * bridge is SIGKILLed and started again, and `closeout_wait` returns the real result; input is answered once through
 * the host's elicitation and once through `closeout_answer`; an upstream that is down is a clear tool error.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { CallToolResult, JSONRPCMessage } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { CLI, type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

let dir: string;
let upstream: ServeProcess;
const hosts: Array<{ client: Client; transport: StdioClientTransport }> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-bridge-'));
  upstream = await startServe(['--store', join(dir, 'server.db')]);
});

afterAll(async () => {
  for (const { client } of hosts) await client.close().catch(() => undefined);
  await upstream?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A host that starts the bridge over stdio (with elicitation declared or not), speaking 2025-11-25 unless `revision`
 * says otherwise (2025-06-18 with `initialize`, or 2026-07-28). `replies` holds every message the bridge sent it, as
 * it came over the pipe, and `sent` every message the host sent it once connected.
 */
async function host(options: {
  ledger: string;
  url?: string;
  /** Declare elicitation and answer it (true), or declare it and never answer (`silent`). */
  elicitation?: boolean | 'silent';
  wait?: number;
  revision?: '2025-06-18' | '2025-11-25' | '2026-07-28';
}) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'bridge', options.url ?? upstream.url, '--ledger', options.ledger, '--wait', String(options.wait ?? 3)],
    stderr: 'pipe',
  });
  const revision = options.revision ?? '2025-11-25';
  const client = new Client(
    { name: 'test-host', version: '1.0.0' },
    {
      ...(options.elicitation ? { capabilities: { elicitation: {} } } : {}),
      ...(revision === '2026-07-28'
        ? { versionNegotiation: { mode: { pin: revision } } }
        : { supportedProtocolVersions: [revision] }),
    },
  );
  const asked: string[] = [];
  if (options.elicitation) {
    client.setRequestHandler('elicitation/create', (request) => {
      asked.push(request.params.message);
      if (options.elicitation === 'silent') return new Promise<never>(() => undefined);
      return { action: 'accept', content: { approve: true, note: 'from the host' } };
    });
  }
  await client.connect(transport);
  const replies: JSONRPCMessage[] = [];
  const deliver = transport.onmessage;
  transport.onmessage = (...args: Parameters<NonNullable<typeof deliver>>) => {
    replies.push(args[0]);
    deliver?.(...args);
  };
  const sent: JSONRPCMessage[] = [];
  const send = transport.send.bind(transport);
  transport.send = (...args: Parameters<typeof send>) => {
    sent.push(args[0]);
    return send(...args);
  };
  hosts.push({ client, transport });
  return { client, transport, asked, replies, sent };
}

/** The host kills its bridge (SIGKILL: no cleanup) and starts another on the same ledger, declaring elicitation. */
async function restart(previous: { transport: StdioClientTransport }, ledger: string) {
  process.kill(previous.transport.pid!, 'SIGKILL');
  return host({ ledger, elicitation: true });
}

async function waitText(client: Client, taskId: string, seconds = 30): Promise<string> {
  return textOf(await client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds } }));
}

function textOf(result: unknown): string {
  return ((result as CallToolResult).content ?? []).map((c) => (c.type === 'text' ? c.text : '')).join('\n');
}

/** A 3-step batch_job through the bridge: its result inline, and its status messages as progress on the way. */
async function expectShortTaskInline(client: Client): Promise<void> {
  const progress: string[] = [];
  const result = await client.callTool(
    { name: 'batch_job', arguments: { items: 3, stepMs: 300 } },
    { onprogress: (p) => progress.push(p.message ?? '') },
  );
  expect(textOf(result)).toContain('Processed 3 items');
  expect(progress.some((message) => /Processed \d of 3 items/.test(message))).toBe(true);
}

function taskIdIn(text: string): string {
  const id = /Task (\S+) /.exec(text)?.[1];
  expect(id, text).toBeDefined();
  return id!;
}

describe('closeout bridge', { timeout: 120_000 }, () => {
  it('lists the upstream tools and its own, and answers a short task inline with progress', async () => {
    const { client } = await host({ ledger: join(dir, 'short.db') });
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    expect(names).toEqual(expect.arrayContaining(['batch_job', 'approve_deploy', 'closeout_wait', 'closeout_tasks']));
    await expectShortTaskInline(client);
  });

  it("names each of its own tools in the README's table with every argument of its schema", async () => {
    const { client } = await host({ ledger: join(dir, 'readme.db') });
    const own = (await client.listTools()).tools.filter((tool) => tool.name.startsWith('closeout_'));
    expect(own.map((tool) => tool.name).sort()).toEqual([
      'closeout_answer',
      'closeout_cancel',
      'closeout_tasks',
      'closeout_wait',
    ]);
    const readme = readFileSync(join(import.meta.dirname, '..', '..', 'README.md'), 'utf8');
    for (const tool of own) {
      const row = readme.split('\n').find((line) => line.startsWith(`| \`${tool.name}\` |`));
      expect(row, `README's row for ${tool.name}`).toBeDefined();
      for (const argument of Object.keys(tool.inputSchema.properties ?? {})) expect(row).toContain(`\`${argument}\``);
    }
  });

  it.each([false, true])(
    'answers a 2 s task inline to a call with no progress token (elicitation declared: %s), and sends it no progress',
    async (elicitation) => {
      const { client, replies, sent } = await host({
        ledger: join(dir, `no-token-${elicitation}.db`),
        elicitation,
        // well past the task's 2 s, so a slow machine still gets the result inline
        wait: 10,
      });
      // 4 steps of 500 ms, each with a status message the bridge would pass on as progress had the call a token
      const result = await client.callTool({ name: 'batch_job', arguments: { items: 4, stepMs: 500 } });
      expect(textOf(result)).toContain('Processed 4 items');
      expect((result as CallToolResult).structuredContent).toMatchObject({ processed: 4, attempt: 1 });
      const calls = sent.filter((message) => 'method' in message && message.method === 'tools/call');
      expect(calls).toHaveLength(1);
      expect(calls[0]).not.toHaveProperty(['params', '_meta', 'progressToken']);
      // spec: progress notifications MUST only reference tokens provided in an active request
      const progress = replies.filter((message) => 'method' in message && message.method === 'notifications/progress');
      expect(progress).toEqual([]);
    },
  );

  it('answers a 20 s task with its id at --wait 3; after a SIGKILL a new bridge returns its real result', async () => {
    const ledger = join(dir, 'long.db');
    const first = await host({ ledger, wait: 3 });
    const calledAt = Date.now();
    const answer = await first.client.callTool({ name: 'batch_job', arguments: { items: 40, stepMs: 500 } });
    const answeredAfterMs = Date.now() - calledAt;
    const text = textOf(answer);
    expect(text).toMatch(/still working.*closeout_wait/);
    // at --wait: not before, and well before the task's end
    expect(answeredAfterMs).toBeGreaterThanOrEqual(3_000);
    expect(answeredAfterMs).toBeLessThan(6_500);
    const taskId = taskIdIn(text);
    // the host (say) restarts it: the process dies with no chance to clean up
    process.kill(first.transport.pid!, 'SIGKILL');
    const second = await host({ ledger });
    // about 17 s of the task are left: one wait is enough, a second one allows for a slow machine (both within the
    // describe's 120 s)
    let result = await second.client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 40 } });
    if (/still/.test(textOf(result))) {
      result = await second.client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 40 } });
    }
    expect(textOf(result)).toContain('Processed 40 items');
    // the upstream ran it once: the task's own attempt count
    expect((result as CallToolResult).structuredContent).toMatchObject({ processed: 40, attempt: 1 });
    const listed = await second.client.callTool({ name: 'closeout_tasks', arguments: {} });
    expect(textOf(listed)).toContain(taskId);
  });

  it.each(['2025-06-18', '2026-07-28'] as const)(
    'gives a %s host results shaped for its revision',
    async (revision) => {
      const { client, replies } = await host({ ledger: join(dir, `revision-${revision}.db`), revision });
      expect(client.getNegotiatedProtocolVersion()).toBe(revision);
      await expectShortTaskInline(client);
      const reply = replies.find((message) => JSON.stringify(message).includes('Processed 3 items'));
      const result = (reply as { result?: Record<string, unknown> } | undefined)?.result;
      expect(result?.['structuredContent']).toMatchObject({ processed: 3 });
      // `resultType` is 2026-07-28's: a 2025 host never sees it, a 2026-07-28 host always does
      if (revision === '2026-07-28') expect(result?.['resultType']).toBe('complete');
      else expect(result).not.toHaveProperty('resultType');
    },
  );

  it('gives a host that retries a call the same task, and a new one with --no-dedupe', async () => {
    const { client } = await host({ ledger: join(dir, 'dedupe.db'), wait: 1 });
    const call = { name: 'batch_job', arguments: { items: 6, stepMs: 500 } };
    const first = taskIdIn(textOf(await client.callTool(call)));
    const retried = taskIdIn(textOf(await client.callTool(call)));
    expect(retried).toBe(first);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'bridge', upstream.url, '--ledger', join(dir, 'dedupe.db'), '--wait', '1', '--no-dedupe'],
      stderr: 'pipe',
    });
    const plain = new Client({ name: 'test-host', version: '1.0.0' });
    await plain.connect(transport);
    hosts.push({ client: plain, transport });
    expect(taskIdIn(textOf(await plain.callTool(call)))).not.toBe(first);
  });

  it('puts input to a host that declared elicitation, once, and the task completes with the answer', async () => {
    const { client, asked } = await host({ ledger: join(dir, 'elicit.db'), elicitation: true, wait: 20 });
    const result = await client.callTool({ name: 'approve_deploy', arguments: { env: 'prod' } });
    expect(textOf(result)).toContain('Deployed to prod');
    expect(asked).toHaveLength(1);
  });

  it('puts a question that came after the call answered to an eliciting host at its next closeout_wait, once', async () => {
    // --wait 0: the call answers with the task id before the task asks anything
    const { client, asked } = await host({ ledger: join(dir, 'late-question.db'), elicitation: true, wait: 0 });
    const taskId = taskIdIn(textOf(await client.callTool({ name: 'approve_deploy', arguments: { env: 'qa' } })));
    // the question reaches the bridge while no call of the host waits on the task
    await waitFor('the task to ask', async () => {
      const listed = textOf(await client.callTool({ name: 'closeout_tasks', arguments: {} }));
      return listed.includes(`${taskId}  approve_deploy  input_required`) ? true : undefined;
    });
    const result = await client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 30 } });
    expect(textOf(result)).toContain('Deployed to qa');
    expect(asked).toHaveLength(1);
  });

  it('asks a 2026-07-28 host that declared elicitation with an input_required result, once', async () => {
    const { client, asked, replies } = await host({
      ledger: join(dir, 'mrtr.db'),
      elicitation: true,
      revision: '2026-07-28',
      wait: 20,
    });
    const result = await client.callTool({ name: 'approve_deploy', arguments: { env: 'edge' } });
    expect(textOf(result)).toContain('Deployed to edge');
    expect(asked).toHaveLength(1);
    const resultTypes = replies.map((message) => (message as { result?: { resultType?: string } }).result?.resultType);
    expect(resultTypes).toContain('input_required');
  });

  it('never asks again a question answered before the bridge was SIGKILLed', async () => {
    const ledger = join(dir, 'answered-restart.db');
    const first = await host({ ledger, elicitation: true, wait: 1 });
    const started = await first.client.callTool({ name: 'approve_deploy', arguments: { env: 'prod', deployMs: 4000 } });
    const taskId = taskIdIn(textOf(started));
    expect(first.asked).toHaveLength(1);
    const second = await restart(first, ledger);
    expect(await waitText(second.client, taskId)).toContain('Deployed to prod');
    expect(second.asked).toHaveLength(0);
  });

  it('asks once more a question the host was asked but never answered before the bridge was SIGKILLed', async () => {
    const ledger = join(dir, 'unanswered-restart.db');
    // the host shows the question and nobody answers it; the call answers with the task id at --wait
    const first = await host({ ledger, elicitation: 'silent', wait: 2 });
    const taskId = taskIdIn(textOf(await first.client.callTool({ name: 'approve_deploy', arguments: { env: 'dr' } })));
    expect(first.asked).toHaveLength(1);
    // never answered, so the next bridge puts it to the host again, within its closeout_wait; the wait lets the new
    // bridge's resume reach the question first (its first poll answers well within it), so no call waits on the task
    // when it does
    const second = await restart(first, ledger);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(await waitText(second.client, taskId)).toContain('Deployed to dr');
    expect(second.asked).toHaveLength(1);
    // answered now: a third bridge on the ledger asks nobody
    const third = await restart(second, ledger);
    expect(await waitText(third.client, taskId, 5)).toContain('Deployed to dr');
    expect(third.asked).toHaveLength(0);
  });

  it('tells a host without elicitation the question at once, and closeout_answer answers it', async () => {
    const { client } = await host({ ledger: join(dir, 'answer.db'), wait: 20 });
    const started = Date.now();
    const asked = await client.callTool({ name: 'approve_deploy', arguments: { env: 'staging' } });
    const text = textOf(asked);
    expect(text).toMatch(/needs input/);
    expect(text).toContain('key "approval"');
    // at once, not at the end of the 20 s wait
    expect(Date.now() - started).toBeLessThan(15_000);
    const taskId = taskIdIn(text);
    const answered = await client.callTool({
      name: 'closeout_answer',
      arguments: { taskId, key: 'approval', response: { action: 'accept', content: { approve: true } } },
    });
    expect((answered as CallToolResult).isError).not.toBe(true);
    const result = await client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 30 } });
    expect(textOf(result)).toContain('Deployed to staging');
  });

  it('while the upstream is down: a clear tool error for a call, and its task followed to the result once it is back', async () => {
    const store = join(dir, 'outage-server.db');
    let server = await startServe(['--store', store]);
    try {
      const { client } = await host({ ledger: join(dir, 'outage.db'), url: server.url, wait: 1 });
      const started = textOf(await client.callTool({ name: 'batch_job', arguments: { items: 8, stepMs: 500 } }));
      const taskId = taskIdIn(started);
      // the upstream dies under its running task
      await server.kill();
      const refused = (await client.callTool({ name: 'batch_job', arguments: { items: 2 } })) as CallToolResult;
      expect(refused.isError).toBe(true);
      expect(textOf(refused)).toMatch(/upstream server cannot be reached .*nothing was sent/);
      const meanwhile = (await client.callTool({
        name: 'closeout_wait',
        arguments: { taskId, seconds: 1 },
      })) as CallToolResult;
      expect(meanwhile.isError, textOf(meanwhile)).not.toBe(true);
      expect(textOf(meanwhile)).toMatch(/still/);
      // back on the same address and store: the new upstream takes the task up, the bridge follows it there
      server = await startServe(['--port', new URL(server.url).port, '--store', store]);
      let result = await client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 40 } });
      if (/still/.test(textOf(result))) {
        result = await client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 40 } });
      }
      expect(textOf(result)).toContain('Processed 8 items');
      expect((result as CallToolResult).structuredContent).toMatchObject({ processed: 8, attempt: 2 });
      // and the call refused during the outage goes through now
      const retried = await client.callTool({ name: 'batch_job', arguments: { items: 2, stepMs: 100 } });
      expect(textOf(retried)).toContain('Processed 2 items');
    } finally {
      await server.stop();
    }
  });

  it('gives a clear tool error when the upstream server is down', async () => {
    const { client } = await host({ ledger: join(dir, 'down.db'), url: 'http://127.0.0.1:9/mcp' });
    const result = (await client.callTool({ name: 'batch_job', arguments: { items: 1 } })) as CallToolResult;
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(/upstream server cannot be reached/);
  });
});

describe('closeout bridge over a stdio upstream', { timeout: 120_000 }, () => {
  /** A host that starts `closeout bridge -- node closeout serve --stdio`: the bridge starts its upstream itself. */
  async function stdioHost(ledger: string, wait = 3) {
    const upstreamCommand = [process.execPath, CLI, 'serve', '--stdio', '--store', join(dir, 'stdio-server.db')];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'bridge', '--ledger', ledger, '--wait', String(wait), '--', ...upstreamCommand],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'test-host', version: '1.0.0' });
    await client.connect(transport);
    hosts.push({ client, transport });
    return { client, transport };
  }

  it('answers a short task inline with progress, from a server it started over stdio', async () => {
    const { client } = await stdioHost(join(dir, 'stdio-short.db'));
    const names = (await client.listTools()).tools.map((tool) => tool.name);
    expect(names).toEqual(expect.arrayContaining(['batch_job', 'closeout_wait']));
    await expectShortTaskInline(client);
  });

  it('answers a long task with its id; after a SIGKILL of the bridge, a new one and its new upstream return the result', async () => {
    const ledger = join(dir, 'stdio-long.db');
    const first = await stdioHost(ledger);
    const text = textOf(await first.client.callTool({ name: 'batch_job', arguments: { items: 12, stepMs: 500 } }));
    expect(text).toMatch(/closeout_wait/);
    const taskId = taskIdIn(text);
    // the bridge dies at once; its upstream sees its stdin close and hands its running task back to the store
    process.kill(first.transport.pid!, 'SIGKILL');
    const second = await stdioHost(ledger);
    let result = await second.client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 40 } });
    if (/still/.test(textOf(result))) {
      result = await second.client.callTool({ name: 'closeout_wait', arguments: { taskId, seconds: 40 } });
    }
    expect(textOf(result)).toContain('Processed 12 items');
    // the new upstream process took the task up from the store: a second attempt, resumed where the first stopped
    expect((result as CallToolResult).structuredContent).toMatchObject({ processed: 12, attempt: 2 });
  });

  it('takes its upstream as one --stdio-command line, split into words as a shell would', async () => {
    // a host config gives one string; the store's folder has a space, quoted as a shell would need it
    const folder = join(dir, 'a folder');
    mkdirSync(folder);
    const line = `${process.execPath} ${CLI} serve --stdio --store '${join(folder, 'server.db')}'`;
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'bridge', '--ledger', join(dir, 'stdio-command.db'), '--stdio-command', line],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'test-host', version: '1.0.0' });
    await client.connect(transport);
    hosts.push({ client, transport });
    await expectShortTaskInline(client);
    expect(existsSync(join(folder, 'server.db'))).toBe(true);
    // a line no shell could split is refused with its reason
    expect(await failedStart(['--stdio-command', "node 'serve.js"])).toMatch(/--stdio-command: .*quoted/);
  });

  it('on a fresh machine keeps its default ledger in a new owner-only ~/.closeout', async () => {
    // a home with no ~/.closeout yet, and no --ledger: the bridge makes the folder as `closeout serve --stdio` does
    const home = join(dir, 'fresh-home');
    mkdirSync(home);
    const upstreamCommand = [process.execPath, CLI, 'serve', '--stdio', '--store', join(dir, 'fresh-server.db')];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'bridge', '--', ...upstreamCommand],
      env: { ...stringEnvironment(), HOME: home },
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const client = new Client({ name: 'test-host', version: '1.0.0' });
    await client.connect(transport).catch((error: unknown) => {
      throw new Error(`the bridge did not start: ${String(error)}\n${stderr}`);
    });
    hosts.push({ client, transport });
    await expectShortTaskInline(client);
    expect(statSync(join(home, '.closeout')).mode & 0o777).toBe(0o700);
    expect(existsSync(join(home, '.closeout', 'bridge.db'))).toBe(true);
  });

  it('blames the ledger, not the upstream, when its ledger cannot be opened', async () => {
    const stderr = await failedStart([
      '--ledger',
      join(dir, 'no-such-folder', 'bridge.db'),
      '--',
      ...[process.execPath, CLI, 'serve', '--stdio', '--store', join(dir, 'stdio-server.db')],
    ]);
    expect(stderr).toMatch(/the bridge's ledger \S*no-such-folder\/bridge\.db cannot be opened/);
    expect(stderr).not.toMatch(/upstream server .* could not be started/);
  });

  it('says clearly when the upstream command cannot be started', async () => {
    const stderr = await failedStart(['--ledger', join(dir, 'stdio-missing.db'), '--', join(dir, 'no-such-server')]);
    expect(stderr).toMatch(/the upstream server `\S*no-such-server` could not be started: .*ENOENT/);
  });

  /** Starts `closeout bridge ARGS`, which must fail to start, and returns what it said on stderr. */
  async function failedStart(args: string[]): Promise<string> {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'bridge', ...args],
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const client = new Client({ name: 'test-host', version: '1.0.0' });
    await expect(client.connect(transport)).rejects.toThrow();
    await new Promise((resolve) => setTimeout(resolve, 500));
    return stderr;
  }
});

/** This process's environment without unset entries, for a child given an environment of its own. */
function stringEnvironment(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}
