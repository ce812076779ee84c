// Invariant: what src/client/transport/sdkGlue.ts relies on in the SDK still holds. If one of these fails after an SDK
// upgrade, read the failure message: it says which assumption broke and what to change.
import {
  Client,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { attachTaskResultCarrier, TASK_CARRIER_ERROR_CODE } from '../../src/client/transport/sdkGlue.js';
import { EmptyResultSchema, JsonObjectSchema } from '../../src/protocol/index.js';
import type { FixtureServer } from './fixtures/tasksFixtureServer.js';
import { startTasksFixture } from './fixtures/tasksFixtureServer.js';

const TASKS_META = {
  'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
};

let fixture: FixtureServer;
let client: Client;

beforeEach(async () => {
  fixture = await startTasksFixture();
  client = new Client({ name: 'glue-test', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
});

afterEach(async () => {
  await client.close();
  await fixture.close();
});

describe('the SDK behaviour sdkGlue relies on', () => {
  it('still rejects resultType "task" from tools/call (if this fails, the SDK learned tasks: retire sdkGlue)', async () => {
    await client.connect(new StreamableHTTPClientTransport(fixture.url));
    const error = await client.callTool({ name: 'slow', arguments: {}, _meta: TASKS_META }).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error, 'SDK accepted a CreateTaskResult on its own: replace the carrier with the SDK API').toBeInstanceOf(
      SdkError,
    );
    expect((error as SdkError).code).toBe(SdkErrorCode.UnsupportedResultType);
  });

  it('carries a CreateTaskResult past the codec untouched when attached before connect', async () => {
    const transport = new StreamableHTTPClientTransport(fixture.url);
    const carrier = attachTaskResultCarrier(transport);
    await client.connect(transport);
    expect(client.getProtocolEra(), 'the connect probe must still negotiate 2026-07-28 through the carrier').toBe(
      'modern',
    );
    const error = await client.callTool({ name: 'slow', arguments: {}, _meta: TASKS_META }).catch((e: unknown) => e);
    const carried = carrier.extract(error);
    expect(carried, 'ProtocolError no longer keeps an unknown code and its data').toBeDefined();
    const task = [...fixture.tasks.values()][0];
    expect(carried).toEqual({
      resultType: 'task',
      taskId: task?.taskId,
      status: 'working',
      createdAt: task?.createdAt,
      lastUpdatedAt: task?.lastUpdatedAt,
      ttlMs: 60_000,
      pollIntervalMs: 20,
    });
  });

  it('works when attached after connect, and leaves requests that did not declare the extension alone', async () => {
    const transport = new StreamableHTTPClientTransport(fixture.url);
    await client.connect(transport);
    const carrier = attachTaskResultCarrier(transport);
    expect(attachTaskResultCarrier(transport)).toBe(carrier);
    const plain = await client.callTool({ name: 'slow', arguments: {} });
    expect(plain.content).toHaveLength(1); // the fixture runs it inline: no declaration, no task
    const error = await client.callTool({ name: 'slow', arguments: {}, _meta: TASKS_META }).catch((e: unknown) => e);
    expect(carrier.extract(error)).toMatchObject({ resultType: 'task', status: 'working' });
  });

  it('does not let a server error pose as a carried task', () => {
    const transport = new StreamableHTTPClientTransport(fixture.url);
    const carrier = attachTaskResultCarrier(transport);
    const forged = new ProtocolError(TASK_CARRIER_ERROR_CODE, 'forged', {
      'io.closeout/taskCarrier': 'guess',
      result: { resultType: 'task' },
    });
    expect(carrier.extract(forged)).toBeUndefined();
    expect(carrier.extract(new Error('plain'))).toBeUndefined();
  });

  it('sets Mcp-Name and Mcp-Method for tasks/get, tasks/update and tasks/cancel sent with a schema', async () => {
    const transport = new StreamableHTTPClientTransport(fixture.url);
    const carrier = attachTaskResultCarrier(transport);
    await client.connect(transport);
    const error = await client.callTool({ name: 'ask', arguments: {}, _meta: TASKS_META }).catch((e: unknown) => e);
    const taskId = String(carrier.extract(error)?.['taskId']);
    await client.request({ method: 'tasks/get', params: { taskId, _meta: TASKS_META } }, JsonObjectSchema);
    await client.request(
      { method: 'tasks/update', params: { taskId, inputResponses: {}, _meta: TASKS_META } },
      EmptyResultSchema,
    );
    await client.request({ method: 'tasks/cancel', params: { taskId, _meta: TASKS_META } }, EmptyResultSchema);
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      const request = fixture.requests.find((r) => r.method === method);
      expect(request?.headers.mcpName, `the SDK stopped setting Mcp-Name for ${method}: set it in sdkGlue`).toBe(
        taskId,
      );
      expect(request?.headers.mcpMethod).toBe(method);
      expect(JSON.stringify(request?.params['_meta'])).toContain('io.modelcontextprotocol/tasks');
    }
  });

  it('rejects an unknown resultType on tasks/get with UNSUPPORTED_RESULT_TYPE (serverOutput relies on it)', async () => {
    await client.connect(new StreamableHTTPClientTransport(fixture.url));
    const transport = client.transport;
    expect(transport).toBeDefined();
    const carrier = attachTaskResultCarrier(transport!);
    const error = await client
      .callTool({ name: 'get-bad-resulttype', arguments: {}, _meta: TASKS_META })
      .catch((e: unknown) => e);
    const taskId = String(carrier.extract(error)?.['taskId']);
    const rejected = await client
      .request({ method: 'tasks/get', params: { taskId, _meta: TASKS_META } }, JsonObjectSchema)
      .catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(SdkError);
    expect((rejected as SdkError).code).toBe(SdkErrorCode.UnsupportedResultType);
  });

  it('keeps a stdio transport the same instance the SDK recognises by its fields and prototype', () => {
    const transport = new StdioClientTransport({ command: process.execPath, args: ['-e', ''] });
    const prototype = Object.getPrototypeOf(transport) as object;
    attachTaskResultCarrier(transport);
    expect(Object.getPrototypeOf(transport)).toBe(prototype);
    // the SDK's probe picks the stdio path by `'stderr' in t && 'pid' in t` and a prototype owning `_dispose`
    expect('stderr' in transport && 'pid' in transport).toBe(true);
    expect(Object.prototype.hasOwnProperty.call(prototype, '_dispose')).toBe(true);
  });
});
