/**
 * closeout/openai-agents against the real @openai/agents-core (pinned) and `closeout serve`: each tool is invoked as
 * the Agents SDK's runner invokes a function tool (a run context, the arguments as JSON text, the function call item).
 * A task's result is the tool's output, status messages reach `onProgress`, the same call id never runs the tool
 * twice, a failed task becomes the error output the model reads (with its JSON-RPC code), an inline tool is a
 * plain tool, and an input request is answered by the adapter's handler or stated and answered through
 * `closeout_answer`, asked once.
 */
import { join } from 'node:path';

import { RunContext } from '@openai/agents-core';
import { describe, expect, it } from 'vitest';

import { openAIAgentsTaskTools } from '../../src/adapters/openaiAgents.js';
import { connectHttpTaskClient } from '../../src/client/index.js';
import { ADAPTER_TOOL_NAMES, serveForAdapterTests } from '../support/adapterServe.js';
import { runsOf } from '../support/runLog.js';

const serve = serveForAdapterTests('closeout-openai-agents-');

/** Invokes `tool` as the runner does for a function call of the model. */
function invoke(tool: Awaited<ReturnType<typeof openAIAgentsTaskTools>>[number], callId: string, args: object) {
  const json = JSON.stringify(args);
  return tool.invoke(new RunContext(), json, {
    toolCall: { type: 'function_call', callId, name: tool.name, arguments: json },
  });
}

describe('closeout/openai-agents', { timeout: 90_000 }, () => {
  it("turns the server's tools into function tools with their names and JSON Schema parameters", async () => {
    const tools = await openAIAgentsTaskTools(serve.client);
    expect(tools.map((each) => each.name).sort()).toEqual(ADAPTER_TOOL_NAMES);
    const batch = tools.find((each) => each.name === 'batch_job')!;
    expect(batch.parameters).toMatchObject({ type: 'object', properties: { items: { type: 'integer' } } });
    expect(batch.strict).toBe(false);
  });

  it('runs a task tool to its result with progress, and a replay of the call id runs nothing', async () => {
    const progress: string[] = [];
    const [batch] = await openAIAgentsTaskTools(serve.client, {
      tools: ['batch_job'],
      onProgress: (update) => progress.push(update.statusMessage),
    });
    expect(await invoke(batch!, 'fc-1', { items: 3, stepMs: 200 })).toBe('Processed 3 items');
    expect(progress.some((message) => /Processed \d of 3 items/.test(message))).toBe(true);
    expect(await invoke(batch!, 'fc-1', { items: 3, stepMs: 200 })).toBe('Processed 3 items');
    const taskId = (await serve.client.get('openai-agents:fc-1'))?.taskId;
    expect(taskId).toBeDefined();
    expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);
  });

  it('gives the model a failed task as an error output with its JSON-RPC code, and runs inline tools plainly', async () => {
    const tools = await openAIAgentsTaskTools(serve.client, { tools: ['flaky_upstream', 'echo'] });
    const flaky = tools.find((each) => each.name === 'flaky_upstream')!;
    expect(await invoke(flaky, 'fc-2', {})).toMatch(/failed: .*\(JSON-RPC -?\d+\)/);
    const echo = tools.find((each) => each.name === 'echo')!;
    expect(await invoke(echo, 'fc-3', { text: 'hi' })).toContain('hi');
  });

  it("answers an input request with the adapter's handler, or states it and answers it through closeout_answer", async () => {
    // the TaskClient declares elicitation (so the server may ask) with no handler of its own
    const asking = await connectHttpTaskClient(serve.server.url, {
      ledger: join(serve.dir, 'openai-asking-ledger.db'),
      capabilities: { elicitation: {} },
    });
    try {
      const asked: string[] = [];
      const [handled] = await openAIAgentsTaskTools(asking, {
        tools: ['approve_deploy'],
        inputHandlers: {
          elicitation: (request) => {
            asked.push(String(request.params.message));
            return { action: 'accept', content: { approve: true, note: 'handler' } };
          },
        },
      });
      expect(await invoke(handled!, 'fc-deploy', { env: 'staging', deployMs: 50 })).toBe(
        'Deployed to staging (handler)',
      );
      expect(asked).toEqual(['Deploy to staging?']);

      const tools = await openAIAgentsTaskTools(asking, { tools: ['approve_deploy'] });
      const deploy = tools.find((each) => each.name === 'approve_deploy')!;
      const stated = await invoke(deploy, 'fc-deploy-2', { env: 'prod', deployMs: 50 });
      expect(stated).toMatch(/waiting for input .*Deploy to prod\?.*closeout_answer.*"approval"/);
      const taskId = (await asking.get('openai-agents:fc-deploy-2'))?.taskId;
      expect(taskId).toBeDefined();
      const answer = tools.find((each) => each.name === 'closeout_answer')!;
      const response = { action: 'accept', content: { approve: true, note: 'model' } };
      expect(await invoke(answer, 'fc-answer', { taskId, key: 'approval', response })).toBe('Deployed to prod (model)');
      // the same call again finds the task done: asked once, run once
      expect(await invoke(deploy, 'fc-deploy-2', { env: 'prod', deployMs: 50 })).toBe('Deployed to prod (model)');
      expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);
    } finally {
      await asking.close();
    }
  });
});
