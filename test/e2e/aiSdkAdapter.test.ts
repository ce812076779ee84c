/**
 * closeout/ai-sdk under the AI SDK itself (`ai`, pinned): `streamText` with the AI SDK's MockLanguageModelV4 calls the
 * tools of a real `closeout serve`. A task's result reaches the model's next step, its status messages arrive as
 * preliminary tool results, a failed task is a tool error with its JSON-RPC code, an inline tool is a plain tool, an
 * abort detaches (the same tool-call id later gets the same task, run once) or cancels, an input request nobody here
 * answers is stated and answered through `closeout_answer`, and an agent process SIGKILLed while its tool's task runs
 * is replayed by another with the same tool-call id, which gets the task's real result while the server ran it once.
 * Against a server of the tools the demo lacks (fixtures/outcomeServer.mjs): a result of structured content only
 * reaches the model as that content's JSON, and a task cancelled by another client and one the server has forgotten (a
 * replay past the task's TTL and retention) end as distinct errors, `cancelled` and `expired`. `ai` 7 declares Node 22
 * or later; it loads and runs on this Node (20), where this test runs it.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { LanguageModelV4StreamPart } from '@ai-sdk/provider';
import { stepCountIs, streamText } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { describe, expect, it } from 'vitest';

import { type AiSdkTaskResult, aiSdkTaskTools, TaskToolError } from '../../src/adapters/aiSdk.js';
import type { TaskClient } from '../../src/client/index.js';
import { connectHttpTaskClient } from '../../src/client/index.js';
import { ADAPTER_TOOL_NAMES, serveForAdapterTests, serveOutcomeTools } from '../support/adapterServe.js';
import { killAgentWithItsTask } from '../support/agentCrash.js';
import { handlerStarts, runsOf, settled } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

const ADAPTER = fileURLToPath(new URL('../../dist/adapters/aiSdk.js', import.meta.url));
const CLIENT = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));

const serve = serveForAdapterTests('closeout-ai-sdk-');
const outcomes = serveOutcomeTools('closeout-ai-sdk-outcomes-');

type Step = { calls: Array<{ id: string; name: string; input: object }> } | { text: string };

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** The AI SDK's mock model answering each step from the script: tool calls, then text. */
function scriptedModel(steps: Step[]): MockLanguageModelV4 {
  let call = 0;
  return new MockLanguageModelV4({
    doStream: async () => {
      const step = steps[Math.min(call++, steps.length - 1)]!;
      const parts: LanguageModelV4StreamPart[] = [{ type: 'stream-start', warnings: [] }];
      if ('text' in step) {
        parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: step.text });
        parts.push({ type: 'text-end', id: 't' });
      } else {
        for (const each of step.calls) {
          parts.push({
            type: 'tool-call',
            toolCallId: each.id,
            toolName: each.name,
            input: JSON.stringify(each.input),
          });
        }
      }
      parts.push({
        type: 'finish',
        finishReason: { unified: 'text' in step ? 'stop' : 'tool-calls', raw: undefined },
        usage,
      });
      return {
        stream: new ReadableStream({
          start: (controller) => (parts.forEach((part) => controller.enqueue(part)), controller.close()),
        }),
      };
    },
  });
}

type Part = { type: string; [key: string]: unknown };

async function runAgent(
  steps: Step[],
  options: Parameters<typeof aiSdkTaskTools>[1] = {},
  onPart: (part: Part) => void = () => undefined,
  abortSignal?: AbortSignal,
  using: TaskClient = serve.client,
) {
  const model = scriptedModel(steps);
  const tools = await aiSdkTaskTools(using, options);
  const stream = streamText({ model, prompt: 'go', tools, stopWhen: stepCountIs(steps.length), abortSignal });
  const parts: Part[] = [];
  for await (const part of stream.fullStream) {
    parts.push(part as Part);
    onPart(part as Part);
  }
  return { parts, model };
}

function outputOf(parts: Part[], toolCallId: string): AiSdkTaskResult | undefined {
  const found = parts.find(
    (part) => part.type === 'tool-result' && part['toolCallId'] === toolCallId && part['preliminary'] !== true,
  );
  return found?.['output'] as AiSdkTaskResult | undefined;
}

describe('closeout/ai-sdk under streamText', { timeout: 120_000 }, () => {
  it("turns the server's tools into AI SDK tools with JSON Schema inputs, titles and descriptions, or a subset", async () => {
    const tools = await aiSdkTaskTools(serve.client);
    expect(Object.keys(tools).sort()).toEqual(ADAPTER_TOOL_NAMES);
    expect(tools['batch_job']!.description).toMatch(/batch of items/);
    expect(tools['approve_deploy']!.title).toBe('Deploy with approval');
    expect((tools['batch_job']!.inputSchema as { jsonSchema: object }).jsonSchema).toMatchObject({
      type: 'object',
      properties: { items: { type: 'integer' } },
    });
    expect(Object.keys(await aiSdkTaskTools(serve.client, { tools: ['echo'] }))).toEqual(['echo', 'closeout_answer']);
    await expect(aiSdkTaskTools(serve.client, { tools: ['nope'] })).rejects.toThrow(
      /the server has no tool "nope"; it has .*batch_job/,
    );
  });

  it("runs a task tool: progress as preliminary results, the result in the model's next step, a replay runs nothing", async () => {
    const steps: Step[] = [
      { calls: [{ id: 'call-1', name: 'batch_job', input: { items: 3, stepMs: 200 } }] },
      { text: 'done' },
    ];
    const run = await runAgent(steps);
    const preliminary = run.parts
      .filter((part) => part.type === 'tool-result' && part['preliminary'] === true)
      .map((part) => (part['output'] as { statusMessage: string }).statusMessage);
    expect(preliminary.some((message) => /Processed \d of 3 items/.test(message))).toBe(true);
    const output = outputOf(run.parts, 'call-1')!;
    expect(output).toMatchObject({
      type: 'result',
      text: 'Processed 3 items',
      structuredContent: { processed: 3, attempt: 1 },
      isError: false,
    });
    expect(JSON.stringify(run.model.doStreamCalls[1]!.prompt)).toContain('Processed 3 items');
    expect((await serve.client.get('ai-sdk:call-1'))?.taskId).toBe(output.taskId);

    const replay = await runAgent(steps);
    expect(outputOf(replay.parts, 'call-1')).toMatchObject({ taskId: output.taskId, text: 'Processed 3 items' });
    expect(runsOf(serve.runLog, output.taskId!)).toHaveLength(1);
  });

  it('reports a failed task as a tool error with its JSON-RPC code, and runs an inline tool as a plain tool', async () => {
    const run = await runAgent([
      {
        calls: [
          { id: 'call-2', name: 'flaky_upstream', input: {} },
          { id: 'call-3', name: 'echo', input: { text: 'hi' } },
        ],
      },
      { text: 'ok' },
    ]);
    const failure = run.parts.find((part) => part.type === 'tool-error' && part['toolCallId'] === 'call-2')?.['error'];
    expect(failure).toBeInstanceOf(TaskToolError);
    expect(failure).toMatchObject({
      kind: 'failed',
      code: -32603,
      message: expect.stringMatching(/Upstream API rate limit exceeded \(JSON-RPC -32603\)/),
    });
    expect(JSON.stringify(run.model.doStreamCalls[1]!.prompt)).toContain('Upstream API rate limit exceeded');
    expect(outputOf(run.parts, 'call-3')).toMatchObject({
      type: 'result',
      taskId: undefined,
      text: expect.stringContaining('hi'),
    });
  });

  it('detaches on abort (the same call id later gets the same task, run once), or cancels with onAbort: cancel', async () => {
    const steps: Step[] = [
      { calls: [{ id: 'call-abort', name: 'batch_job', input: { items: 4, stepMs: 400 } }] },
      { text: 'done' },
    ];
    const aborting = new AbortController();
    let taskId: string | undefined;
    await runAgent(
      steps,
      {},
      (part) => {
        if (part.type === 'tool-result' && part['preliminary'] === true && taskId === undefined) {
          taskId = (part['output'] as { taskId: string }).taskId;
          aborting.abort();
        }
      },
      aborting.signal,
    ).catch(() => undefined);
    expect(taskId).toEqual(expect.any(String));
    await waitFor(
      'the task to be detached',
      async () => ((await serve.client.get(taskId!))?.localState === 'detached' ? true : undefined),
      30_000,
      50,
    );
    const later = await runAgent(steps);
    expect(outputOf(later.parts, 'call-abort')).toMatchObject({ taskId, text: 'Processed 4 items' });
    expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);

    const cancelling = new AbortController();
    let cancelledId: string | undefined;
    await runAgent(
      [{ calls: [{ id: 'call-cancel', name: 'batch_job', input: { items: 50, stepMs: 300 } }] }, { text: 'done' }],
      { onAbort: 'cancel' },
      (part) => {
        if (part.type === 'tool-result' && part['preliminary'] === true && cancelledId === undefined) {
          cancelledId = (part['output'] as { taskId: string }).taskId;
          cancelling.abort();
        }
      },
      cancelling.signal,
    ).catch(() => undefined);
    expect((await settled(serve.server.url, cancelledId!, 30_000))['status']).toBe('cancelled');
  });

  it("answers an input request with the adapter's handler, or states it and answers it through closeout_answer", async () => {
    // the TaskClient declares elicitation (so the server may ask) with no handler of its own: the adapter's answer
    const asking = await connectHttpTaskClient(serve.server.url, {
      ledger: join(serve.dir, 'asking-ledger.db'),
      capabilities: { elicitation: {} },
    });
    const asked: string[] = [];
    const handled = await runAgent(
      [
        { calls: [{ id: 'call-deploy', name: 'approve_deploy', input: { env: 'staging', deployMs: 50 } }] },
        { text: 'ok' },
      ],
      {
        inputHandlers: {
          elicitation: (request) => {
            asked.push(String(request.params.message));
            return { action: 'accept', content: { approve: true, note: 'handler' } };
          },
        },
      },
      undefined,
      undefined,
      asking,
    );
    expect(outputOf(handled.parts, 'call-deploy')).toMatchObject({ text: 'Deployed to staging (handler)' });
    expect(asked).toEqual(['Deploy to staging?']);

    const stated = await runAgent(
      [
        { calls: [{ id: 'call-deploy-2', name: 'approve_deploy', input: { env: 'prod', deployMs: 50 } }] },
        { text: 'I need an answer' },
      ],
      {},
      undefined,
      undefined,
      asking,
    );
    const pending = outputOf(stated.parts, 'call-deploy-2')!;
    expect(pending.inputRequired).toMatchObject({
      key: 'approval',
      method: 'elicitation/create',
      message: 'Deploy to prod?',
    });
    expect(pending.text).toMatch(/Deploy to prod\?.*closeout_answer/);
    const answered = await runAgent(
      [
        {
          calls: [
            {
              id: 'call-answer',
              name: 'closeout_answer',
              input: {
                taskId: pending.taskId,
                key: 'approval',
                response: { action: 'accept', content: { approve: true, note: 'model' } },
              },
            },
          ],
        },
        { text: 'deployed' },
      ],
      {},
      undefined,
      undefined,
      asking,
    );
    expect(outputOf(answered.parts, 'call-answer')).toMatchObject({
      taskId: pending.taskId,
      text: 'Deployed to prod (model)',
    });
    expect(runsOf(serve.runLog, pending.taskId!)).toHaveLength(1);
    await asking.close();
  });

  it('gives an agent replayed after a SIGKILL the real result of the task its first run started, run once', async () => {
    const agentScript = `
      const { connectHttpTaskClient } = await import(${JSON.stringify(CLIENT)});
      const { aiSdkTaskTools } = await import(${JSON.stringify(ADAPTER)});
      const client = await connectHttpTaskClient(${JSON.stringify(serve.server.url)}, { ledger: ${JSON.stringify(join(serve.dir, 'ledger.db'))} });
      const tools = await aiSdkTaskTools(client, { tools: ['batch_job'], scope: 'run-7' });
      for await (const _ of tools.batch_job.execute({ items: 10, stepMs: 300 }, { toolCallId: 'crash-1', messages: [], context: {} })) {}
    `;
    const taskId = await killAgentWithItsTask(serve, agentScript, 'ai-sdk:run-7:crash-1');
    const before = handlerStarts(serve.runLog);

    const replay = await runAgent(
      [{ calls: [{ id: 'crash-1', name: 'batch_job', input: { items: 10, stepMs: 300 } }] }, { text: 'done' }],
      { tools: ['batch_job'], scope: 'run-7' },
    );
    expect(outputOf(replay.parts, 'crash-1')).toMatchObject({ taskId, text: 'Processed 10 items' });
    // the replay started no handler: the server ran the tool once, for the first run's task
    expect(handlerStarts(serve.runLog)).toBe(before);
    expect(runsOf(serve.runLog, taskId)).toHaveLength(1);
  });
});

describe('closeout/ai-sdk: the ends the demo tools lack', { timeout: 120_000 }, () => {
  it('gives the model a result with structured content and no text as that content, JSON, in its text', async () => {
    const steps: Step[] = [{ calls: [{ id: 'call-measure', name: 'measure', input: {} }] }, { text: 'ok' }];
    const run = await runAgent(steps, {}, undefined, undefined, outcomes.client);
    expect(outputOf(run.parts, 'call-measure')).toMatchObject({
      text: '{"widths":[3,4],"unit":"cm"}',
      structuredContent: { widths: [3, 4], unit: 'cm' },
    });
  });

  it('raises a task cancelled by another client and one that expired as tool errors of distinct kinds', async () => {
    const errorOf = (parts: Part[], toolCallId: string) =>
      parts.find((part) => part.type === 'tool-error' && part['toolCallId'] === toolCallId)?.['error'];
    const waiting = runAgent(
      [{ calls: [{ id: 'call-wait', name: 'wait', input: {} }] }, { text: 'ok' }],
      {},
      undefined,
      undefined,
      outcomes.client,
    );
    const taskId = await outcomes.cancelFromAnotherClient('ai-sdk:call-wait');
    const cancelled = errorOf((await waiting).parts, 'call-wait');
    expect(cancelled).toBeInstanceOf(TaskToolError);
    expect(cancelled).toMatchObject({ kind: 'cancelled', taskId, message: `task ${taskId} was cancelled` });

    // a replay of a call whose task the server has forgotten since (past its TTL and retention)
    const ledger = join(outcomes.dir, 'replay-ledger.db');
    const forgotten = await outcomes.forgottenTask(ledger, 'outlive_ttl', 'ai-sdk:call-ttl');
    const replaying = await connectHttpTaskClient(outcomes.server.url, { ledger });
    const replay = await runAgent(
      [{ calls: [{ id: 'call-ttl', name: 'outlive_ttl', input: {} }] }, { text: 'ok' }],
      {},
      undefined,
      undefined,
      replaying,
    ).finally(() => replaying.close());
    const expired = errorOf(replay.parts, 'call-ttl');
    expect(expired).toBeInstanceOf(TaskToolError);
    expect(expired).toMatchObject({
      kind: 'expired',
      taskId: forgotten,
      message: expect.stringMatching(/^task \S+ expired: /),
    });
  });
});
