/**
 * closeout/langchain against the real @langchain/core (pinned) and `closeout serve`: tools are invoked as an agent's
 * tool node invokes them, with a tool call (name, args, id). A task's result reaches the ToolMessage (text as content,
 * the CallToolResult as artifact), its status messages arrive as custom events, a failed task is an error the framework
 * raises, an inline tool is a plain tool, the same tool-call id never runs the tool twice, an input request is answered
 * by the adapter's handler or stated and answered through `closeout_answer` (asked once); and an agent process
 * SIGKILLed while its tool's task runs is replayed by another with the same tool-call id, which gets the task's real
 * result while the server ran the tool once. Against a server of the tools the demo lacks (fixtures/outcomeServer.mjs):
 * a result of structured content only reaches the model as that content's JSON, and a task cancelled by another client
 * and one the server has forgotten (a replay past the task's TTL and retention) end as distinct errors, `cancelled` and
 * `expired`.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { ToolMessage } from '@langchain/core/messages';
import { describe, expect, it } from 'vitest';

import { closeTaskTools, langchainTaskTools, TaskToolError } from '../../src/adapters/langchain.js';
import { connectHttpTaskClient } from '../../src/client/index.js';
import { ADAPTER_TOOL_NAMES, serveForAdapterTests, serveOutcomeTools } from '../support/adapterServe.js';
import { killAgentWithItsTask } from '../support/agentCrash.js';
import { handlerStarts, runsOf } from '../support/runLog.js';

const ADAPTER = fileURLToPath(new URL('../../dist/adapters/langchain.js', import.meta.url));
const CLIENT = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));

const serve = serveForAdapterTests('closeout-langchain-');
const outcomes = serveOutcomeTools('closeout-langchain-outcomes-');

async function toolNamed(name: string) {
  const [found] = await langchainTaskTools(serve.client, { tools: [name] });
  expect(found?.name).toBe(name);
  return found!;
}

describe('closeout/langchain', { timeout: 90_000 }, () => {
  it("turns the server's tools into LangChain tools with their names, descriptions and schemas", async () => {
    const tools = await langchainTaskTools(serve.client);
    expect(tools.map((each) => each.name).sort()).toEqual(ADAPTER_TOOL_NAMES);
    const batch = tools.find((each) => each.name === 'batch_job')!;
    expect(batch.description).toMatch(/batch of items/);
    expect(batch.schema).toMatchObject({ type: 'object', properties: { items: { type: 'integer' } } });
  });

  it("connects a TaskClient of its own from connect options, closed by closeTaskTools; a caller's client stays open", async () => {
    const ledger = join(serve.dir, 'langchain-connected-ledger.db');
    const tools = await langchainTaskTools({ url: serve.server.url, ledger }, { tools: ['echo'] });
    const call = { name: 'echo', args: { text: 'hi' }, id: 'lc-connected', type: 'tool_call' as const };
    expect(((await tools[0]!.invoke(call)) as ToolMessage).content).toContain('hi');
    await closeTaskTools(tools);
    await expect(tools[0]!.invoke({ ...call, id: 'lc-connected-2' })).rejects.toThrow(/closed/);
    // tools made from the caller's TaskClient: closeTaskTools leaves it to the caller
    const own = await langchainTaskTools(serve.client, { tools: ['echo'] });
    await closeTaskTools(own);
    expect(((await own[0]!.invoke({ ...call, id: 'lc-own' })) as ToolMessage).content).toContain('hi');
  });

  it('runs a task tool: the result is the ToolMessage, progress arrives as custom events, a replay runs nothing', async () => {
    const batch = await toolNamed('batch_job');
    const progress: Array<{ statusMessage: string }> = [];
    const call = { name: 'batch_job', args: { items: 3, stepMs: 200 }, id: 'call-1', type: 'tool_call' as const };
    const message = (await batch.invoke(call, {
      callbacks: [
        {
          handleCustomEvent: (name: string, data: unknown) => {
            if (name === 'closeout_progress') progress.push(data as { statusMessage: string });
          },
        },
      ],
    })) as ToolMessage;
    expect(message.content).toBe('Processed 3 items');
    expect(message.tool_call_id).toBe('call-1');
    expect(message.artifact).toMatchObject({ structuredContent: { processed: 3, attempt: 1 } });
    expect(progress.some((update) => /Processed \d of 3 items/.test(update.statusMessage))).toBe(true);

    const replayed = (await batch.invoke(call)) as ToolMessage;
    expect(replayed.content).toBe('Processed 3 items');
    const taskId = (await serve.client.get('langchain:call-1'))?.taskId;
    expect(taskId).toBeDefined();
    expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);
  });

  it('raises a failed task as an error with its JSON-RPC code, and runs an inline tool as a plain tool', async () => {
    const flaky = await toolNamed('flaky_upstream');
    const failure = await flaky
      .invoke({ name: 'flaky_upstream', args: {}, id: 'call-2', type: 'tool_call' })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(TaskToolError);
    expect(failure).toMatchObject({ kind: 'failed', code: expect.any(Number) });
    const echo = await toolNamed('echo');
    const echoed = (await echo.invoke({
      name: 'echo',
      args: { text: 'hi' },
      id: 'call-3',
      type: 'tool_call',
    })) as ToolMessage;
    expect(echoed.content).toContain('hi');
  });

  it("answers an input request with the adapter's handler, or states it and answers it through closeout_answer", async () => {
    // the TaskClient declares elicitation (so the server may ask) with no handler of its own
    const asking = await connectHttpTaskClient(serve.server.url, {
      ledger: join(serve.dir, 'langchain-asking-ledger.db'),
      capabilities: { elicitation: {} },
    });
    const call = (name: string, args: object, id: string) => ({ name, args, id, type: 'tool_call' as const });
    try {
      const asked: string[] = [];
      const [handled] = await langchainTaskTools(asking, {
        tools: ['approve_deploy'],
        inputHandlers: {
          elicitation: (request) => {
            asked.push(String(request.params.message));
            return { action: 'accept', content: { approve: true, note: 'handler' } };
          },
        },
      });
      const done = (await handled!.invoke(
        call('approve_deploy', { env: 'staging', deployMs: 50 }, 'lc-deploy'),
      )) as ToolMessage;
      expect(done.content).toBe('Deployed to staging (handler)');
      expect(asked).toEqual(['Deploy to staging?']);

      const tools = await langchainTaskTools(asking, { tools: ['approve_deploy'] });
      const deploy = tools.find((each) => each.name === 'approve_deploy')!;
      const stated = (await deploy.invoke(
        call('approve_deploy', { env: 'prod', deployMs: 50 }, 'lc-deploy-2'),
      )) as ToolMessage;
      expect(stated.content).toMatch(/waiting for input .*Deploy to prod\?.*closeout_answer.*"approval"/);
      const pending = (stated.artifact as { _meta: Record<string, { taskId: string; key: string }> })._meta[
        'io.closeout/inputRequired'
      ]!;
      expect(pending.key).toBe('approval');
      const answer = tools.find((each) => each.name === 'closeout_answer')!;
      const response = { action: 'accept', content: { approve: true, note: 'model' } };
      const answered = (await answer.invoke(
        call('closeout_answer', { taskId: pending.taskId, key: 'approval', response }, 'lc-answer'),
      )) as ToolMessage;
      expect(answered.content).toBe('Deployed to prod (model)');
      expect(runsOf(serve.runLog, pending.taskId)).toHaveLength(1);
    } finally {
      await asking.close();
    }
  });

  it('gives an agent replayed after a SIGKILL the real result of the task its first run started, run once', async () => {
    const taskId = await killAgentWithItsTask(
      serve,
      `
      const { connectHttpTaskClient } = await import(${JSON.stringify(CLIENT)});
      const { langchainTaskTools } = await import(${JSON.stringify(ADAPTER)});
      const client = await connectHttpTaskClient(${JSON.stringify(serve.server.url)}, { ledger: ${JSON.stringify(join(serve.dir, 'ledger.db'))} });
      const [batch] = await langchainTaskTools(client, { tools: ['batch_job'] });
      const call = { name: 'batch_job', args: { items: 10, stepMs: 300 }, id: 'crash-1', type: 'tool_call' };
      await batch.invoke(call, { configurable: { thread_id: 'thread-7' } });
      `,
      'langchain:thread-7:crash-1',
    );
    const before = handlerStarts(serve.runLog);

    const batch = await toolNamed('batch_job');
    // the replayed run: the same thread, the same tool call (tool-call ids are kept apart per thread)
    const message = (await batch.invoke(
      { name: 'batch_job', args: { items: 10, stepMs: 300 }, id: 'crash-1', type: 'tool_call' },
      { configurable: { thread_id: 'thread-7' } },
    )) as ToolMessage;
    expect(message.content).toBe('Processed 10 items');
    // the replay started no handler: the server ran the tool once, for the first run's task
    expect(handlerStarts(serve.runLog)).toBe(before);
    expect(runsOf(serve.runLog, taskId)).toHaveLength(1);
  });
});

describe('closeout/langchain: the ends the demo tools lack', { timeout: 90_000 }, () => {
  it('gives the model a result with structured content and no text as that content, JSON, in the ToolMessage', async () => {
    const [measure] = await langchainTaskTools(outcomes.client, { tools: ['measure'] });
    const message = (await measure!.invoke({
      name: 'measure',
      args: {},
      id: 'lc-measure',
      type: 'tool_call',
    })) as ToolMessage;
    expect(message.content).toBe('{"widths":[3,4],"unit":"cm"}');
    expect(message.artifact).toMatchObject({ structuredContent: { widths: [3, 4], unit: 'cm' } });
  });

  it('raises a task cancelled by another client and one that expired as TaskToolErrors of distinct kinds', async () => {
    const [wait] = await langchainTaskTools(outcomes.client, { tools: ['wait'] });
    const waiting = wait!
      .invoke({ name: 'wait', args: {}, id: 'lc-wait', type: 'tool_call' })
      .catch((error: unknown) => error);
    const taskId = await outcomes.cancelFromAnotherClient('langchain:lc-wait');
    const cancelled = await waiting;
    expect(cancelled).toBeInstanceOf(TaskToolError);
    expect(cancelled).toMatchObject({ kind: 'cancelled', taskId });
    // a replay of a call whose task the server has forgotten since (past its TTL and retention)
    const ledger = join(outcomes.dir, 'replay-ledger.db');
    const forgotten = await outcomes.forgottenTask(ledger, 'outlive_ttl', 'langchain:lc-ttl');
    const replaying = await connectHttpTaskClient(outcomes.server.url, { ledger });
    const [replayed] = await langchainTaskTools(replaying, { tools: ['outlive_ttl'] });
    const expired = await replayed!
      .invoke({ name: 'outlive_ttl', args: {}, id: 'lc-ttl', type: 'tool_call' })
      .catch((error: unknown) => error)
      .finally(() => replaying.close());
    expect(expired).toBeInstanceOf(TaskToolError);
    expect(expired).toMatchObject({ kind: 'expired', taskId: forgotten });
  });
});
