// The client half against a server nobody here wrote: @modelcontextprotocol/server-everything (pinned), a 2025-era
// server on the official SDK v1, over stdio and over Streamable HTTP. closeout/client negotiates down to its
// revision, declares the Tasks extension only in `_meta` (which such a server ignores), and gets plain results back,
// closed out in the ledger as immediate results: the fallback path every Tasks client meets. Such a server asks for
// input with an `elicitation/create` request on the session during `tools/call`: the client's own input handler
// answers it, with the requested schema's defaults filled in for fields the answer leaves out (SEP-1034).
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { CallToolResult, ElicitRequest } from '@modelcontextprotocol/client';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { TaskClient, TaskInputContext, TaskInputHandlers } from '../../src/client/index.js';
import { connectHttpTaskClient, connectStdioTaskClient, isTaskHandle } from '../../src/client/index.js';

const require = createRequire(import.meta.url);
const EVERYTHING = require.resolve('@modelcontextprotocol/server-everything/dist/index.js');
const { createServer: createEverything } = (await import(
  '@modelcontextprotocol/server-everything/dist/server/index.js' as string
)) as { createServer: () => { server: { connect(t: unknown): Promise<void> }; cleanup?: () => void } };

const dir = mkdtempSync(join(tmpdir(), 'closeout-everything-'));
let http: Server;
let url: string;
const transports = new Map<string, StreamableHTTPServerTransport>();

beforeAll(async () => {
  // the package's own HTTP launcher listens on every interface; this host serves its server on loopback only
  http = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      void (async () => {
        const sessionId = req.headers['mcp-session-id'];
        const parsed = body.length > 0 ? (JSON.parse(body) as unknown) : undefined;
        let transport = typeof sessionId === 'string' ? transports.get(sessionId) : undefined;
        if (!transport) {
          if (req.method !== 'POST' || sessionId !== undefined) return void res.writeHead(404).end();
          const { server } = createEverything();
          const created = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (id) => void transports.set(id, created),
          });
          await server.connect(created);
          transport = created;
        }
        await transport.handleRequest(req, res, parsed);
      })().catch((error: unknown) => {
        if (!res.headersSent) res.writeHead(500).end(String(error));
      });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(http.address() as { port: number }).port}/mcp`;
});

afterAll(async () => {
  for (const transport of transports.values()) await transport.close().catch(() => undefined);
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

function textOf(result: CallToolResult): string {
  const first = result.content[0];
  return first?.type === 'text' ? first.text : '';
}

async function exercise(client: TaskClient): Promise<void> {
  try {
    const echo = await client.callTool('echo', { message: 'from closeout' }, { correlationId: 'everything-1' });
    expect(isTaskHandle(echo)).toBe(false);
    expect(textOf(echo as CallToolResult)).toBe('Echo: from closeout');
    const sum = await client.callTool('get-sum', { a: 2, b: 3 });
    expect(textOf(sum as CallToolResult)).toBe('The sum of 2 and 3 is 5.');
    const records = await client.list();
    expect(records.map((r) => [r.toolName, r.localState, r.terminalReason]).sort()).toEqual([
      ['echo', 'terminal', 'immediate result'],
      ['get-sum', 'terminal', 'immediate result'],
    ]);
  } finally {
    await client.close();
  }
}

/** What the input handler saw: the session-era request and its context. */
interface Asked {
  request: ElicitRequest;
  context: TaskInputContext;
}

function answeringHandlers(asked: Asked[]): TaskInputHandlers {
  return {
    elicitation: (request, context) => {
      asked.push({ request, context });
      // a person who types a name and takes every default
      return { action: 'accept', content: { name: 'Ada Lovelace' } };
    },
  };
}

async function answerOnSession(client: TaskClient, asked: Asked[]): Promise<void> {
  try {
    const answer = await client.callTool('trigger-elicitation-request', {});
    expect(isTaskHandle(answer)).toBe(false);
    const text = (answer as CallToolResult).content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
    expect(text).toContain('- Name: Ada Lovelace');
    // defaults of the requested schema, filled in by the client for the fields the handler left out
    expect(text).toContain('- Favorite Integer: 42');
    expect(text).toContain('- Favorite Number: 3.14');
    expect(text).toContain('It was a dark and stormy night.');
    expect(asked).toHaveLength(1);
    expect(asked[0]!.request.params.message).toBe('Please provide inputs for the following fields:');
    expect(asked[0]!.context).toMatchObject({ taskId: undefined, toolName: 'trigger-elicitation-request' });
    const [record] = await client.list();
    expect([record?.toolName, record?.localState, record?.terminalReason]).toEqual([
      'trigger-elicitation-request',
      'terminal',
      'immediate result',
    ]);
  } finally {
    await client.close();
  }
}

describe('closeout/client against @modelcontextprotocol/server-everything', { timeout: 60_000 }, () => {
  it('over stdio', async () => {
    const client = await connectStdioTaskClient(
      { command: process.execPath, args: [EVERYTHING, 'stdio'], stderr: 'ignore' },
      { ledger: join(dir, 'stdio.db') },
    );
    await exercise(client);
  });

  it('over Streamable HTTP', async () => {
    await exercise(await connectHttpTaskClient(url, { ledger: join(dir, 'http.db') }));
  });

  it('answers input asked on the session over stdio, with schema defaults', async () => {
    const asked: Asked[] = [];
    const client = await connectStdioTaskClient(
      { command: process.execPath, args: [EVERYTHING, 'stdio'], stderr: 'ignore' },
      { ledger: join(dir, 'stdio-input.db'), inputHandlers: answeringHandlers(asked) },
    );
    await answerOnSession(client, asked);
  });

  it('answers input asked on the session over Streamable HTTP, with schema defaults', async () => {
    const asked: Asked[] = [];
    const client = await connectHttpTaskClient(url, {
      ledger: join(dir, 'http-input.db'),
      inputHandlers: answeringHandlers(asked),
    });
    await answerOnSession(client, asked);
  });
});
