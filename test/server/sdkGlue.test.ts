// The SDK internals sdkGlue.ts relies on (SDK 2.4.x): if an upgrade moves any of them, these fail first and say what.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { McpServer } from '@modelcontextprotocol/server';
import { afterAll, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import { createTaskMcpHandler } from '../../src/server/http.js';
import { attachTasks } from '../../src/server/sdkGlue.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-glue-'));
const store = new SqliteTaskStore(join(dir, 'tasks.db'));
const tasks = new TaskServer({ store });
let seenInputResponses: unknown;
tasks.registerTool('echo_task', { task: { support: 'optional' } }, () => ({ content: [{ type: 'text', text: 'ok' }] }));
const handler = createTaskMcpHandler(tasks, {
  setup: (mcp) =>
    mcp.registerTool('probe_inputs', { inputSchema: z.object({}) }, (_args, ctx) => {
      seenInputResponses = (ctx.mcpReq as { inputResponses?: unknown }).inputResponses;
      return { content: [] };
    }),
});

afterAll(async () => {
  await handler.close();
  await tasks.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function post(method: string, params: Record<string, unknown>, name?: string) {
  const response = await handler.fetch(
    new Request('http://in-process/mcp', {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': method,
        ...(name && { 'mcp-name': name }),
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method,
        params: {
          ...params,
          _meta: {
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientInfo': { name: 'glue-test', version: '0' },
            'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
          },
        },
      }),
    }),
  );
  return (await response.json()) as { result?: Record<string, unknown>; error?: { code: number; message: string } };
}

describe('SDK internals sdkGlue relies on', () => {
  it('the low-level server stores its tools/call handler in _requestHandlers', () => {
    const mcp = new McpServer({ name: 't', version: '0' });
    mcp.registerTool('x', {}, () => ({ content: [] }));
    const handlers = (mcp.server as unknown as { _requestHandlers?: unknown })._requestHandlers;
    expect(handlers).toBeInstanceOf(Map);
    expect(typeof (handlers as Map<string, unknown>).get('tools/call')).toBe('function');
    expect(() => attachTasks(mcp, tasks)).not.toThrow();
  });

  it('a CreateTaskResult leaves the SDK flat: resultType task, no content added', async () => {
    const r = await post('tools/call', { name: 'echo_task', arguments: {} }, 'echo_task');
    expect(r.result?.['resultType']).toBe('task');
    expect(r.result).not.toHaveProperty('content');
    expect(typeof r.result?.['taskId']).toBe('string');
  });

  it('the SDK lifts inputResponses into ctx.mcpReq.inputResponses', async () => {
    await post(
      'tools/call',
      { name: 'probe_inputs', arguments: {}, inputResponses: { k: { action: 'accept' } } },
      'probe_inputs',
    );
    expect(seenInputResponses).toEqual({ k: { action: 'accept' } });
  });

  it('a tool without inputSchema gets only the context: task tools are always registered with a schema', async () => {
    const mcp = new McpServer({ name: 't', version: '0' });
    let first: unknown;
    mcp.registerTool('no_schema', {}, (arg: unknown) => {
      first = arg;
      return { content: [] };
    });
    const executor = (
      mcp as unknown as { _registeredTools: Record<string, { executor: (a: unknown, c: unknown) => Promise<unknown> }> }
    )._registeredTools['no_schema']!.executor;
    await executor({ a: 1 }, { ctx: true });
    expect(first).toEqual({ ctx: true });
  });

  it('a server with no tools at all still serves tasks/* (nothing to intercept)', async () => {
    const empty = new TaskServer({ store });
    const bare = createTaskMcpHandler(empty);
    const response = await bare.fetch(
      new Request('http://in-process/mcp', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2026-07-28',
          'mcp-method': 'tasks/get',
          'mcp-name': 'nope',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tasks/get',
          params: {
            taskId: 'nope',
            _meta: {
              'io.modelcontextprotocol/protocolVersion': '2026-07-28',
              'io.modelcontextprotocol/clientInfo': { name: 'glue-test', version: '0' },
              'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
            },
          },
        }),
      }),
    );
    expect(response.status).toBe(200);
    expect(((await response.json()) as { error?: { code: number } }).error?.code).toBe(-32602);
    await bare.close();
  });

  it('the discover result declares the extension', async () => {
    const r = await post('server/discover', {});
    expect(r.result?.['capabilities']).toMatchObject({ extensions: { 'io.modelcontextprotocol/tasks': {} } });
  });
});
