/**
 * closeout/langchain's tools in a real @langchain/langgraph StateGraph (ToolNode, MemorySaver checkpointer) driven by
 * LangChain's fake tool-calling chat model, against `closeout serve`. A task's result reaches the model's next step as
 * the ToolMessage, its status messages reach the run's custom stream (LangGraph's stream writer), and a failed task is
 * the tool's error, which the ToolNode hands the model with the JSON-RPC code; with `input: 'interrupt'` a task's input
 * request stops the run with LangGraph's `interrupt()` (the question as its value), the run resumed with
 * `Command({ resume })` answers the same task (the same tool-call id) and returns its result, the server running the
 * tool once and asking once; a key answered elsewhere before the graph came to it is never put to the graph, and one
 * answered elsewhere after the graph asked keeps that first answer. A task asking two questions stops the run twice,
 * once per question, each resume replaying the earlier answers in order.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { BaseMessage, ToolMessage } from '@langchain/core/messages';
import { AIMessage, AIMessageChunk, HumanMessage } from '@langchain/core/messages';
import type { DynamicStructuredTool } from '@langchain/core/tools';
import { FakeStreamingChatModel } from '@langchain/core/utils/testing';
import { Command, INTERRUPT, isInterrupted, MemorySaver, MessagesAnnotation, StateGraph } from '@langchain/langgraph';
import { ToolNode, toolsCondition } from '@langchain/langgraph/prebuilt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { langchainTaskTools } from '../../src/adapters/langchain.js';
import { connectHttpTaskClient, type TaskClient } from '../../src/client/index.js';
import { serveForAdapterTests } from '../support/adapterServe.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { runsOf } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

const serve = serveForAdapterTests('closeout-langgraph-');

/** The TaskClient declares elicitation (so the server may ask) and has no handler of its own. */
let asking: TaskClient;
beforeAll(async () => {
  asking = await connectHttpTaskClient(serve.server.url, {
    ledger: join(serve.dir, 'langgraph-ledger.db'),
    capabilities: { elicitation: {} },
  });
});
afterAll(async () => {
  await asking?.close();
});

/**
 * An agent graph: the model asks for one tool call (LangChain's fake tool-calling model), a ToolNode runs it, and the
 * model's next step (another fake model) ends the run.
 */
function agentGraph(tools: DynamicStructuredTool[], call: { name: string; args: object; id: string }) {
  const toolCalling = new FakeStreamingChatModel({
    chunks: [new AIMessageChunk({ content: '', tool_calls: [{ ...call, type: 'tool_call' }] })],
  }).bindTools(tools);
  const answering = new FakeStreamingChatModel({ responses: [new AIMessage('All done.')] });
  /** The messages the model was given at each step after the tool's. */
  const nextSteps: BaseMessage[][] = [];
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('agent', async (state) => {
      const afterTool = state.messages.some((message) => message.type === 'tool');
      const reply = afterTool
        ? await answering.invoke(state.messages, {
            callbacks: [{ handleChatModelStart: (_llm, prompts) => void nextSteps.push(prompts[0]!) }],
          })
        : await toolCalling.invoke(state.messages);
      return { messages: [reply] };
    })
    .addNode('tools', new ToolNode(tools))
    .addEdge('__start__', 'agent')
    .addConditionalEdges('agent', toolsCondition, ['tools', '__end__'])
    .addEdge('tools', 'agent')
    .compile({ checkpointer: new MemorySaver() });
  return { graph, nextSteps };
}

function toolMessages(messages: BaseMessage[]): string[] {
  return messages.filter((message) => message.type === 'tool').map((message) => String(message.content));
}

const approved = (note: string) => ({ action: 'accept' as const, content: { approve: true, note } });

describe('closeout/langchain in a LangGraph graph', { timeout: 90_000 }, () => {
  it("gives a task's result to the model's next step, driven by the fake tool-calling model", async () => {
    const tools = await langchainTaskTools(serve.client, { tools: ['batch_job'] });
    const { graph, nextSteps } = agentGraph(tools, {
      name: 'batch_job',
      args: { items: 2, stepMs: 50 },
      id: 'lg-batch',
    });
    const config = { configurable: { thread_id: 'lg-thread-batch' } };
    const end = await graph.invoke({ messages: [new HumanMessage('Process 2 items')] }, config);
    expect(isInterrupted(end)).toBe(false);
    expect(end.messages.at(-1)?.content).toBe('All done.');
    expect(nextSteps).toHaveLength(1);
    expect(toolMessages(nextSteps[0]!)).toEqual(['Processed 2 items']);
    const taskId = (await serve.client.get('langchain:lg-thread-batch:lg-batch'))?.taskId;
    expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);
  });

  it("writes each status message to LangGraph's stream writer: the run's custom stream mode carries them", async () => {
    const tools = await langchainTaskTools(serve.client, { tools: ['batch_job'] });
    const { graph, nextSteps } = agentGraph(tools, {
      name: 'batch_job',
      args: { items: 3, stepMs: 200 },
      id: 'lg-progress',
    });
    const chunks: unknown[] = [];
    const stream = await graph.stream(
      { messages: [new HumanMessage('Process 3 items')] },
      { configurable: { thread_id: 'lg-thread-progress' }, streamMode: 'custom' },
    );
    for await (const chunk of stream) chunks.push(chunk);
    const taskId = (await serve.client.get('langchain:lg-thread-progress:lg-progress'))?.taskId;
    expect(chunks).toContainEqual({
      closeout: { taskId, status: 'working', statusMessage: expect.stringMatching(/Processed \d of 3 items/) },
    });
    expect(toolMessages(nextSteps[0]!)).toEqual(['Processed 3 items']);
  });

  it("reports a failed task as the tool's error, which the ToolNode hands the model's next step with its code", async () => {
    const tools = await langchainTaskTools(serve.client, { tools: ['flaky_upstream'] });
    const { graph, nextSteps } = agentGraph(tools, { name: 'flaky_upstream', args: {}, id: 'lg-flaky' });
    const end = await graph.invoke(
      { messages: [new HumanMessage('Call upstream')] },
      { configurable: { thread_id: 'lg-thread-flaky' } },
    );
    expect(end.messages.at(-1)?.content).toBe('All done.');
    const reported = nextSteps[0]!.filter((message) => message.type === 'tool') as ToolMessage[];
    expect(reported).toHaveLength(1);
    expect(reported[0]!.status).toBe('error');
    expect(String(reported[0]!.content)).toMatch(
      /task \S+ failed: Upstream API rate limit exceeded \(JSON-RPC -32603\)/,
    );
  });

  it('stops the run with interrupt() carrying the question, and the resumed run answers the task and gets its result', async () => {
    const tools = await langchainTaskTools(asking, { tools: ['approve_deploy'], input: 'interrupt' });
    expect(tools.map((each) => each.name)).toEqual(['approve_deploy']);
    const call = { name: 'approve_deploy', args: { env: 'prod', deployMs: 50 }, id: 'lg-deploy' };
    const { graph, nextSteps } = agentGraph(tools, call);
    const config = { configurable: { thread_id: 'lg-thread-1' } };

    const stopped = await graph.invoke({ messages: [new HumanMessage('Deploy to prod')] }, config);
    expect(isInterrupted(stopped)).toBe(true);
    const interrupts = (stopped as unknown as Record<string, Array<{ value: Record<string, unknown> }>>)[INTERRUPT]!;
    expect(interrupts).toHaveLength(1);
    const record = await asking.get('langchain:lg-thread-1:lg-deploy');
    expect(interrupts[0]!.value).toEqual({
      taskId: record!.taskId,
      key: 'approval',
      method: 'elicitation/create',
      message: 'Deploy to prod?',
      requestedSchema: expect.objectContaining({ required: ['approve'] }),
    });
    expect(nextSteps).toEqual([]);

    const end = await graph.invoke(new Command({ resume: approved('graph') }), config);
    expect(isInterrupted(end)).toBe(false);
    expect(end.messages.at(-1)?.content).toBe('All done.');
    expect(toolMessages(nextSteps[0]!)).toEqual(['Deployed to prod (graph)']);

    const closed = await asking.get(record!.recordId);
    expect(closed!.inputs.map((input) => [input.key, input.response])).toEqual([['approval', approved('graph')]]);
    expect(runsOf(serve.runLog, record!.taskId!)).toHaveLength(1);
  });

  it('never puts to the graph a key answered elsewhere before the graph came to it', async () => {
    const args = { env: 'qa', deployMs: 50 };
    // the same task the graph's tool call makes (its idempotency key), started and answered before the graph runs
    const key = 'langchain:lg-thread-2:lg-deploy-2';
    const handle = await asking.callTool('approve_deploy', args, { idempotencyKey: key, correlationId: key });
    const taskId = (handle as { taskId: string }).taskId;
    await waitFor(
      'the task to ask for approval',
      async () => ((await asking.get(key))?.inputs.length === 1 ? true : undefined),
      30_000,
      50,
    );
    expect(await asking.answer(taskId, 'approval', approved('elsewhere'))).toBe(true);

    const tools = await langchainTaskTools(asking, { tools: ['approve_deploy'], input: 'interrupt' });
    const { graph, nextSteps } = agentGraph(tools, { name: 'approve_deploy', args, id: 'lg-deploy-2' });
    const end = await graph.invoke(
      { messages: [new HumanMessage('Deploy to qa')] },
      { configurable: { thread_id: 'lg-thread-2' } },
    );
    expect(isInterrupted(end)).toBe(false);
    expect(toolMessages(nextSteps[0]!)).toEqual(['Deployed to qa (elsewhere)']);
    expect(runsOf(serve.runLog, taskId)).toHaveLength(1);
  });

  it('keeps the first answer of a key answered elsewhere after the graph asked it: the resume value is not sent', async () => {
    const tools = await langchainTaskTools(asking, { tools: ['approve_deploy'], input: 'interrupt' });
    const { graph, nextSteps } = agentGraph(tools, {
      name: 'approve_deploy',
      args: { env: 'staging', deployMs: 50 },
      id: 'lg-deploy-3',
    });
    const config = { configurable: { thread_id: 'lg-thread-3' } };
    const stopped = await graph.invoke({ messages: [new HumanMessage('Deploy to staging')] }, config);
    expect(isInterrupted(stopped)).toBe(true);
    const record = await asking.get('langchain:lg-thread-3:lg-deploy-3');
    expect(await asking.answer(record!.taskId!, 'approval', approved('elsewhere'))).toBe(true);

    const end = await graph.invoke(new Command({ resume: approved('graph') }), config);
    expect(isInterrupted(end)).toBe(false);
    expect(toolMessages(nextSteps[0]!)).toEqual(['Deployed to staging (elsewhere)']);
    const closed = await asking.get(record!.recordId);
    expect(closed!.inputs.map((input) => input.response)).toEqual([approved('elsewhere')]);
    expect(runsOf(serve.runLog, record!.taskId!)).toHaveLength(1);
  });

  it("refuses input 'interrupt' together with the adapter's inputHandlers", async () => {
    await expect(
      langchainTaskTools(asking, { input: 'interrupt', inputHandlers: { elicitation: () => approved('handler') } }),
    ).rejects.toThrow(/give no inputHandlers/);
  });
});

describe('closeout/langchain in a LangGraph graph, a task asking two questions', { timeout: 90_000 }, () => {
  let dir: string;
  let server: ServeProcess;
  let client: TaskClient;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-langgraph-two-'));
    server = await startServe(['--store', join(dir, 'server.db'), '--tools', 'conformance']);
    client = await connectHttpTaskClient(server.url, {
      ledger: join(dir, 'ledger.db'),
      capabilities: { elicitation: {} },
    });
  });
  afterAll(async () => {
    await client?.close();
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('asks each question once, in the order the ledger saw them, and the last resume completes the task', async () => {
    const tools = await langchainTaskTools(client, { tools: ['multi_input'], input: 'interrupt' });
    const { graph, nextSteps } = agentGraph(tools, { name: 'multi_input', args: {}, id: 'lg-two' });
    const config = { configurable: { thread_id: 'lg-thread-two' } };
    const questions = (values: unknown) =>
      ((values as Record<string, Array<{ value: { key: string; message: string } }>>)[INTERRUPT] ?? []).map((each) => [
        each.value.key,
        each.value.message,
      ]);

    const firstStop = await graph.invoke({ messages: [new HumanMessage('Two values, please')] }, config);
    const record = await waitFor(
      'both questions in the ledger',
      async () => {
        const seen = await client.get('langchain:lg-thread-two:lg-two');
        return seen?.inputs.length === 2 ? seen : undefined;
      },
      30_000,
      50,
    );
    const order = record.inputs.map((input) => input.key);
    expect([...order].sort()).toEqual(['first', 'second']);
    const message: Record<string, string> = { first: 'First value?', second: 'Second value?' };
    expect(questions(firstStop)).toEqual([[order[0], message[order[0]!]]]);

    const answer = (value: string) => ({ action: 'accept', content: { value } });
    const secondStop = await graph.invoke(new Command({ resume: answer('a') }), config);
    expect(questions(secondStop)).toEqual([[order[1], message[order[1]!]]]);

    const end = await graph.invoke(new Command({ resume: answer('b') }), config);
    expect(isInterrupted(end)).toBe(false);
    const closed = await client.get(record.recordId);
    const byKey: Record<string, string> = { [order[0]!]: 'a', [order[1]!]: 'b' };
    expect(Object.fromEntries(closed!.inputs.map((input) => [input.key, input.response]))).toEqual({
      first: answer(byKey['first']!),
      second: answer(byKey['second']!),
    });
    expect(toolMessages(nextSteps[0]!)).toEqual([
      `Received {"value":"${byKey['first']}"}, {"value":"${byKey['second']}"}`,
    ]);
  });
});
