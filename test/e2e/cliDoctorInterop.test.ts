// `closeout doctor` against servers it did not pick: a 2025-era server's tools/list error is reported as what it
// is; a server that wants credentials is told apart ("pass --token"), never `undefined`; tools that need arguments
// get them from their schema (default, enum, examples) or are SKIPped with the reason, as is a tool answering -32021
// or asking for input first (an MRTR round), and the next tool is tried; and every probe says it is closeout, with
// its version.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { runCli } from '../support/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-doctor-interop-'));
let server: Server;
let base: string;
const seen: { path: string; method: string; params: Record<string, unknown>; userAgent: string | undefined }[] = [];

const TOOLS = [
  { name: 'free_text', inputSchema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
  { name: 'needs_caps', inputSchema: { type: 'object', properties: {} } },
  { name: 'asks_first', inputSchema: { type: 'object', properties: {} } },
  {
    name: 'with_enum',
    inputSchema: {
      type: 'object',
      properties: {
        mode: { type: 'string', enum: ['fast', 'slow'] },
        region: { type: 'string', default: 'eu' },
        size: { type: 'integer', examples: [3, 4] },
        note: { type: 'string' },
      },
      required: ['mode', 'region', 'size'],
    },
  },
];

function task() {
  const now = new Date().toISOString();
  return {
    taskId: 'doctor-task-1',
    status: 'working',
    createdAt: now,
    lastUpdatedAt: now,
    ttlMs: 60_000,
    pollIntervalMs: 1000,
  };
}

function reply(req: IncomingMessage, body: string): { status: number; payload?: Record<string, unknown> } {
  const request = JSON.parse(body || '{}') as { method?: string; params?: Record<string, unknown> };
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  seen.push({ path, method: request.method ?? '', params: request.params ?? {}, userAgent: req.headers['user-agent'] });
  if (path === '/auth/mcp') return { status: 401 };
  // a 2025-era Streamable HTTP server: no session was initialized, so every request is refused
  if (path === '/legacy/mcp') {
    return { status: 400, payload: { error: { code: -32000, message: 'Bad Request: Server not initialized' } } };
  }
  // a 2026-07-28 server that does not offer Tasks: its one tool answers inline
  if (path === '/plain/mcp') {
    const complete = (result: Record<string, unknown>) => ({
      status: 200,
      payload: { result: { resultType: 'complete', ...result } },
    });
    if (request.method === 'server/discover')
      return complete({ supportedVersions: ['2026-07-28'], capabilities: { tools: {} } });
    if (request.method === 'tools/list')
      return complete({ tools: [{ name: 'hello', inputSchema: { type: 'object' } }] });
    if (request.method === 'tools/call') return complete({ content: [{ type: 'text', text: 'hi' }] });
    return { status: 200, payload: { error: { code: -32601, message: 'Method not found' } } };
  }
  const caps = (request.params?.['_meta'] as Record<string, unknown> | undefined)?.[
    'io.modelcontextprotocol/clientCapabilities'
  ] as { extensions?: Record<string, unknown> } | undefined;
  const declared = caps?.extensions?.['io.modelcontextprotocol/tasks'] !== undefined;
  switch (request.method) {
    case 'server/discover':
      return {
        status: 200,
        payload: {
          result: {
            resultType: 'complete',
            supportedVersions: ['2026-07-28'],
            capabilities: { tools: {}, extensions: { 'io.modelcontextprotocol/tasks': {} } },
          },
        },
      };
    case 'tools/list':
      return { status: 200, payload: { result: { resultType: 'complete', tools: TOOLS } } };
    case 'tools/call':
      if (request.params?.['name'] === 'needs_caps') {
        return {
          status: 200,
          payload: {
            error: { code: -32021, message: 'needs elicitation', data: { requiredCapabilities: { elicitation: {} } } },
          },
        };
      }
      if (request.params?.['name'] === 'asks_first') {
        // an MRTR round: the tool wants an approval before it does anything (core basic/patterns/mrtr)
        return {
          status: 200,
          payload: {
            result: {
              resultType: 'input_required',
              inputRequests: {
                approve: {
                  method: 'elicitation/create',
                  params: { mode: 'form', message: 'Approve?', requestedSchema: { type: 'object', properties: {} } },
                },
              },
              requestState: 'r1',
            },
          },
        };
      }
      return { status: 200, payload: { result: { resultType: 'task', ...task() } } };
    case 'tasks/get': {
      if (!declared) return { status: 200, payload: { error: { code: -32021, message: 'declare the extension' } } };
      if (req.headers['mcp-name'] !== request.params?.['taskId']) {
        return { status: 400, payload: { error: { code: -32020, message: 'Mcp-Name mismatch' } } };
      }
      if (request.params?.['taskId'] !== 'doctor-task-1') {
        return { status: 200, payload: { error: { code: -32602, message: 'Task not found' } } };
      }
      return { status: 200, payload: { result: { resultType: 'complete', ...task() } } };
    }
    case 'tasks/cancel':
      return { status: 200, payload: { result: { resultType: 'complete' } } };
    default:
      return { status: 200, payload: { error: { code: -32601, message: 'Method not found' } } };
  }
}

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const { status, payload } = reply(req, body);
      const id = (JSON.parse(body || '{}') as { id?: unknown }).id ?? null;
      if (!payload) return void res.writeHead(status, { 'www-authenticate': 'Bearer' }).end();
      res
        .writeHead(status, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id, ...payload }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

describe.concurrent('closeout doctor against foreign servers', { timeout: 90_000 }, () => {
  // a correct server must never get a FAIL: one without Tasks is told so, and nothing is checked
  it('tells a 2025-era server it is not a Tasks server, with no FAIL line and no tool called', async () => {
    const run = await runCli(['doctor', `${base}/legacy/mcp`, '--try-listed-tools'], { timeoutMs: 55_000 });
    expect(run.stdout).toMatch(
      /^SKIP {2}discover +server\/discover answered -32000 "Bad Request: Server not initialized" \(HTTP 400\): not a server of the io\.modelcontextprotocol\/tasks extension \(MCP 2026-07-28\), so no check applies$/m,
    );
    expect(run.stdout).not.toContain('FAIL');
    expect(run.stdout.trimEnd().split('\n').at(-1)).toBe('not checked: see SKIP lines');
    expect(run.code).toBe(1);
    expect(seen.some((s) => s.path === '/legacy/mcp' && s.method === 'tools/call')).toBe(false);
  });

  it('tells a 2026-07-28 server without the extension, whose tools answer inline, that nothing applies', async () => {
    const run = await runCli(['doctor', `${base}/plain/mcp`, '--json', '--try-listed-tools'], { timeoutMs: 55_000 });
    const doc = JSON.parse(run.stdout) as { ok: boolean; checks: { name: string; status: string; detail: string }[] };
    expect(doc.checks).toEqual([
      {
        name: 'discover',
        status: 'skip',
        detail:
          'server/discover does not declare io.modelcontextprotocol/tasks in capabilities.extensions: not a server of the io.modelcontextprotocol/tasks extension (MCP 2026-07-28), so no check applies',
      },
    ]);
    expect(doc.ok).toBe(false);
    expect(run.code).toBe(1);
  });

  it('says "pass --token" when the server wants credentials', async () => {
    const run = await runCli(['doctor', `${base}/auth/mcp`, '--try-listed-tools'], { timeoutMs: 55_000 });
    expect(run.stdout).toMatch(
      /^FAIL {2}discover +server\/discover answered HTTP 401 Unauthorized: .*\(pass --token\)$/m,
    );
    expect(run.stdout).not.toContain('undefined');
  });

  it('fills required arguments from the schema, SKIPs what it cannot call with the reason, and tries the next tool', async () => {
    const run = await runCli(['doctor', `${base}/tasks/mcp`, '--json', '--try-listed-tools'], { timeoutMs: 55_000 });
    const doc = JSON.parse(run.stdout) as { checks: { name: string; status: string; detail: string }[] };
    const lines = doc.checks.map((c) => `${c.status} ${c.name}: ${c.detail}`);
    expect(lines).toContainEqual(
      expect.stringMatching(/^skip tool: free_text needs argument "q", which has no default/),
    );
    expect(lines).toContainEqual(
      expect.stringMatching(/^skip tool: needs_caps answered -32021: .*trying the next tool$/),
    );
    // a tool that asks for input first is not a tool answering inline, and not the server's fault
    expect(lines).toContainEqual(
      expect.stringMatching(/^skip tool: asks_first asks for input .*elicitation\/create.*; trying the next tool$/),
    );
    expect(doc.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(lines).toContainEqual(expect.stringMatching(/^pass task handle: with_enum returned taskId doctor-task-1/));
    expect(doc.checks.filter((c) => c.name === 'tool').every((c) => c.status === 'skip')).toBe(true);
    const call = seen.find(
      (s) => s.path === '/tasks/mcp' && s.method === 'tools/call' && s.params['name'] === 'with_enum',
    );
    expect(call?.params['arguments']).toEqual({ mode: 'fast', region: 'eu', size: 3 });
    expect(seen.some((s) => s.params['name'] === 'free_text')).toBe(false);
  });

  it('identifies itself as closeout with its version', async () => {
    await runCli(['doctor', `${base}/legacy/mcp`, '--try-listed-tools'], { timeoutMs: 55_000 });
    const probe = seen.find((s) => s.path === '/legacy/mcp');
    const meta = probe?.params['_meta'] as Record<string, unknown>;
    expect(meta['io.modelcontextprotocol/clientInfo']).toEqual({ name: 'closeout', version: '0.1.0' });
    expect(probe?.userAgent).toBe('closeout/0.1.0');
  });
});
