// Interoperability: the official @modelcontextprotocol/ext-tasks client (0.2.x) drives a real `closeout serve` over
// HTTP through a task with an input request, a task that needs input from a client that declared none (it fails,
// nothing is asked), and a cancelled task, and what it concludes is what the server
// says (tasks/get) and what the server stored. Nothing here is Closeout's client: the wire alone has to agree.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { ApplicationInputRequest, TaskEnabledSession } from '@modelcontextprotocol/ext-tasks/client';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { streamableHttpDispatch } from '../support/extTasksDispatch.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { PROTOCOL_VERSION } from '../support/rpc.js';

const CLIENT_INFO = { name: 'ext-tasks-interop', version: '1.0.0' };

let dir: string;
let server: ServeProcess;
const open: Array<{ session: TaskEnabledSession; client: Client }> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-interop-'));
  server = await startServe(['--store', join(dir, 'server.db')]);
});

afterAll(async () => {
  for (const { session, client } of open) {
    await session.close();
    await client.close();
  }
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const rawDispatch = streamableHttpDispatch(() => server.url);

async function session(
  onInput: (request: ApplicationInputRequest, inputId: string | undefined) => unknown,
  clientCapabilities: Record<string, Record<string, never>> = { elicitation: {} },
) {
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  const tasks = createTaskSessionFromClient(client, {
    endpointId: 'closeout-interop',
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: PROTOCOL_VERSION,
      clientInfo: CLIENT_INFO,
      clientCapabilities,
    },
    onInputRequest: async (request, context) => onInput(request, context.inputId) as never,
  });
  open.push({ session: tasks, client });
  return tasks;
}

/** What the server says about a task, read with a plain tasks/get. */
async function serverView(taskId: string): Promise<Record<string, unknown>> {
  const { result } = (await await rawDispatch({
    method: 'tasks/get',
    params: { taskId, _meta: framing() },
  } as never)) as { result: Record<string, unknown> };
  return result;
}

function framing() {
  return {
    'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
    'io.modelcontextprotocol/clientInfo': CLIENT_INFO,
    'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
  };
}

describe('the official ext-tasks client against closeout serve', () => {
  it('sees the server negotiate the Tasks extension', async () => {
    const tasks = await session(() => ({ action: 'decline' }));
    expect(tasks.capabilities).toMatchObject({ execution: true, cancellation: true, inputResponses: true });
  });

  it('answers an input request once and agrees with the server on the completed result', async () => {
    const asked: Array<{ kind: string; inputId: string | undefined }> = [];
    const tasks = await session((request, inputId) => {
      asked.push({ kind: request.kind, inputId });
      return { action: 'accept', content: { approve: true, note: 'interop' } };
    });
    const execution = await tasks.callTool('approve_deploy', { env: 'staging', deployMs: 100 });
    expect(execution.kind).toBe('task');
    const { outcome, lastTask } = await execution.settle();
    expect(asked).toEqual([{ kind: 'elicitation', inputId: 'approval' }]);
    // ext-tasks validates the result as a 2026-07-28 CallToolResult, whose `resultType` is required
    let why: unknown = outcome.status === 'failed' ? outcome.error : '';
    while (why instanceof Error && why.cause !== undefined) why = why.cause;
    expect(outcome.status, `ext-tasks refused the server's result: ${String(why)}`).toBe('completed');

    const taskId = (execution as { handle: { taskId: string } }).handle.taskId;
    const view = await serverView(taskId);
    expect(view).toMatchObject({ taskId, status: 'completed' });
    expect(lastTask?.status).toBe('completed');
    expect(outcome.status === 'completed' && outcome.result).toMatchObject(view['result'] as Record<string, unknown>);
    expect((view['result'] as { content: Array<{ text: string }> }).content[0]?.text).toBe(
      'Deployed to staging (interop)',
    );
  });

  it('never asks a client that declares no elicitation: the task fails with -32021 and nothing is asked', async () => {
    // docs/DESIGN.md rule 6 (MRTR: servers MUST NOT send input requests the client has not declared)
    const asked: string[] = [];
    const tasks = await session((request) => asked.push(request.kind), {});
    const execution = await tasks.callTool('approve_deploy', { env: 'staging', deployMs: 0 });
    expect(execution.kind).toBe('task');
    const { outcome } = await execution.settle();
    const taskId = (execution as { handle: { taskId: string } }).handle.taskId;
    const view = await serverView(taskId);
    expect(view).toMatchObject({ status: 'failed', error: { code: -32021 } });
    expect((view['error'] as { message: string }).message).toContain('did not declare elicitation');
    expect(outcome.status).toBe('failed');
    expect(asked).toEqual([]);
  });

  it('cancels a running task and agrees with the server that it was cancelled', async () => {
    const tasks = await session(() => ({ action: 'decline' }));
    const execution = await tasks.callTool('batch_job', { items: 50, stepMs: 200 });
    expect(execution.kind).toBe('task');
    const taskId = (execution as { handle: { taskId: string } }).handle.taskId;
    await expect
      .poll(async () => (await serverView(taskId))['statusMessage'], { timeout: 10_000 })
      .toMatch(/^Processed/);
    await execution.cancel();
    const { outcome } = await execution.settle();
    const view = await serverView(taskId);
    expect(view['status']).toBe('cancelled');
    expect(outcome.status).toBe('cancelled');
  });
});
