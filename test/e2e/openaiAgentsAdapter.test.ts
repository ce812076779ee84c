/**
 * closeout/openai-agents against the real @openai/agents-core (pinned) and `closeout serve`: runs of an Agent driven by
 * the Agents SDK's own scripted test model (`ScriptedModel`: a function call, then a final message echoing the tool's
 * output), and tools invoked as the runner invokes a function tool. A task's result is the tool's output, status
 * messages reach `onProgress`, the same call id never runs the tool twice, a failed task becomes the error output the
 * model reads (with its JSON-RPC code), an inline tool is a plain tool, and an input request is answered by the
 * adapter's handler or stated and answered through `closeout_answer`, asked once. With `inputAsApproval` a task's
 * question pauses the run as an approval interruption: its state, serialized and restored in another process, is
 * approved there and the call returns the task's result; an answer is sent once, and the task runs once. An agent
 * process SIGKILLed while its tool's task runs is replayed by another with the same function call id, which gets the
 * task's real result while the server ran the tool once. Against a server of the tools the demo lacks
 * (fixtures/outcomeServer.mjs): a result of structured content only reaches the model as that content's JSON, and a
 * task cancelled by another client and one the server has forgotten (a replay past the task's TTL and retention) end as
 * distinct errors, `cancelled` and `expired`.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Agent, type AgentInputItem, RunContext, Runner, RunState } from '@openai/agents-core';
import { assistantMessage, functionCall, modelResponder, ScriptedModel } from '@openai/agents-core/testing';
import { describe, expect, it } from 'vitest';

import { answerInterruption, interruptionInput, openAIAgentsTaskTools } from '../../src/adapters/openaiAgents.js';
import { connectHttpTaskClient, type TaskClient } from '../../src/client/index.js';
import { ADAPTER_TOOL_NAMES, serveForAdapterTests, serveOutcomeTools } from '../support/adapterServe.js';
import { killAgentWithItsTask } from '../support/agentCrash.js';
import { handlerStarts, runsOf } from '../support/runLog.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ADAPTER = fileURLToPath(new URL('../../dist/adapters/openaiAgents.js', import.meta.url));
const CLIENT = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));

const serve = serveForAdapterTests('closeout-openai-agents-');
const outcomes = serveOutcomeTools('closeout-openai-agents-outcomes-');
const runner = new Runner({ tracingDisabled: true });

/** The final message of a scripted model: the text of every tool output it was given, one per line. */
const echoToolOutputs = modelResponder((call) => {
  const items = typeof call.request.input === 'string' ? [] : call.request.input;
  const outputs = items
    .filter((item): item is AgentInputItem & { type: 'function_call_result' } => item.type === 'function_call_result')
    .map((item) => (typeof item.output === 'string' ? item.output : 'text' in item.output ? item.output.text : ''));
  return [assistantMessage(outputs.join('\n'))];
});

/** An Agent whose scripted model calls `name` with `args` (function call `callId`), then echoes the tool's output. */
function scriptedAgent(
  tools: Awaited<ReturnType<typeof openAIAgentsTaskTools>>,
  name: string,
  args: object,
  callId: string,
) {
  const model = new ScriptedModel([[functionCall(name, { ...args }, { callId })], echoToolOutputs]);
  return { agent: new Agent({ name: 'ops', instructions: 'Use the tools when asked.', tools, model }), model };
}

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

  it('runs a task tool to its result with progress in a scripted run, and a replay of the call id runs nothing', async () => {
    const progress: string[] = [];
    const tools = await openAIAgentsTaskTools(serve.client, {
      tools: ['batch_job'],
      onProgress: (update) => progress.push(update.statusMessage),
    });
    const first = scriptedAgent(tools, 'batch_job', { items: 3, stepMs: 200 }, 'fc-1');
    expect((await runner.run(first.agent, 'Process 3 items')).finalOutput).toBe('Processed 3 items');
    first.model.assertComplete();
    expect(progress.some((message) => /Processed \d of 3 items/.test(message))).toBe(true);
    // a run replayed with the same function call gets the same task's result
    const replay = scriptedAgent(tools, 'batch_job', { items: 3, stepMs: 200 }, 'fc-1');
    expect((await runner.run(replay.agent, 'Process 3 items')).finalOutput).toBe('Processed 3 items');
    const taskId = (await serve.client.get('openai-agents:fc-1'))?.taskId;
    expect(taskId).toBeDefined();
    expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);
  });

  it('gives the model a failed task as an error output with its JSON-RPC code, and runs inline tools plainly', async () => {
    const tools = await openAIAgentsTaskTools(serve.client, { tools: ['flaky_upstream', 'echo'] });
    const failing = scriptedAgent(tools, 'flaky_upstream', {}, 'fc-2');
    expect((await runner.run(failing.agent, 'Call upstream')).finalOutput).toMatch(/failed: .*\(JSON-RPC -?\d+\)/);
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

  it('gives an agent replayed after a SIGKILL the real result of the task its first run started, run once', async () => {
    const args = { items: 10, stepMs: 300 };
    // the agent's own run, in a process of its own: the scripted model calls batch_job, the runner runs the tool
    const taskId = await killAgentWithItsTask(
      serve,
      `
      import { Agent, Runner } from '@openai/agents-core';
      import { functionCall, ScriptedModel } from '@openai/agents-core/testing';
      const { connectHttpTaskClient } = await import(${JSON.stringify(CLIENT)});
      const { openAIAgentsTaskTools } = await import(${JSON.stringify(ADAPTER)});
      const client = await connectHttpTaskClient(${JSON.stringify(serve.server.url)}, { ledger: ${JSON.stringify(join(serve.dir, 'ledger.db'))} });
      const tools = await openAIAgentsTaskTools(client, { tools: ['batch_job'], scope: 'run-7' });
      const model = new ScriptedModel([[functionCall('batch_job', ${JSON.stringify(args)}, { callId: 'crash-1' })]]);
      await new Runner({ tracingDisabled: true }).run(new Agent({ name: 'ops', tools, model }), 'Process 10 items');
      `,
      'openai-agents:run-7:crash-1',
      ROOT,
    );
    const before = handlerStarts(serve.runLog);
    const tools = await openAIAgentsTaskTools(serve.client, { tools: ['batch_job'], scope: 'run-7' });
    const replay = scriptedAgent(tools, 'batch_job', args, 'crash-1');
    expect((await runner.run(replay.agent, 'Process 10 items')).finalOutput).toBe('Processed 10 items');
    // the replay started no handler: the server ran the tool once, for the first run's task
    expect(handlerStarts(serve.runLog)).toBe(before);
    expect(runsOf(serve.runLog, taskId)).toHaveLength(1);
  });

  it("pauses on a task's question as an approval interruption, approved in a run restored by another process", async () => {
    const ledger = join(serve.dir, 'openai-approval-ledger.db');
    const options = { tools: ['approve_deploy'], scope: 'conversation-7', inputAsApproval: ['approve_deploy'] };
    const asking = await connectHttpTaskClient(serve.server.url, { ledger, capabilities: { elicitation: {} } });
    let taskId: string;
    const stateFile = join(serve.dir, 'approval-state.json');
    try {
      const tools = await openAIAgentsTaskTools(asking, options);
      const { agent, model } = scriptedAgent(tools, 'approve_deploy', { env: 'prod', deployMs: 50 }, 'fc-approve');
      const paused = await runner.run(agent, 'Deploy to prod');
      expect(model.calls).toHaveLength(1);
      expect(paused.interruptions.map((item) => item.name)).toEqual(['approve_deploy']);
      const question = await interruptionInput(asking, paused.interruptions[0]!, options);
      expect(question).toMatchObject({
        key: 'approval',
        method: 'elicitation/create',
        message: 'Deploy to prod?',
        requestedSchema: { required: ['approve'] },
      });
      taskId = question!.taskId;
      expect((await asking.get('openai-agents:conversation-7:fc-approve'))?.taskId).toBe(taskId);
      writeFileSync(stateFile, paused.state.toString());
    } finally {
      await asking.close();
    }

    const first = await resumeApproved(ledger, stateFile, options);
    expect(first.question).toMatchObject({ taskId, key: 'approval', message: 'Deploy to prod?' });
    expect(first.finalOutput).toBe('Deployed to prod');
    expect(first.interruptions).toBe(0);
    const answered = await answersOf(ledger, 'openai-agents:conversation-7:fc-approve');
    expect(answered).toEqual([{ key: 'approval', response: { action: 'accept', content: { approve: true } } }]);

    // a restart from the same saved interruption: nothing is asked or answered again, the task's result comes back
    const again = await resumeApproved(ledger, stateFile, options);
    expect(again.question).toBeUndefined();
    expect(again.finalOutput).toBe('Deployed to prod');
    expect(await answersOf(ledger, 'openai-agents:conversation-7:fc-approve')).toEqual(answered);
    expect(runsOf(serve.runLog, taskId)).toHaveLength(1);
  });

  it("gives a person's own answer, or a decline, through answerInterruption after a restore on the same ledger", async () => {
    const ledger = join(serve.dir, 'openai-answer-ledger.db');
    const options = { tools: ['approve_deploy'], inputAsApproval: true };
    const saved: string[] = [];
    const first = await connectHttpTaskClient(serve.server.url, { ledger, capabilities: { elicitation: {} } });
    try {
      const tools = await openAIAgentsTaskTools(first, options);
      for (const [env, callId] of [
        ['staging', 'fc-answer-1'],
        ['qa', 'fc-answer-2'],
      ] as const) {
        const paused = await runner.run(
          scriptedAgent(tools, 'approve_deploy', { env, deployMs: 50 }, callId).agent,
          env,
        );
        expect(paused.interruptions).toHaveLength(1);
        saved.push(paused.state.toString());
      }
    } finally {
      await first.close();
    }

    const second = await connectHttpTaskClient(serve.server.url, { ledger, capabilities: { elicitation: {} } });
    try {
      const tools = await openAIAgentsTaskTools(second, options);
      const answers = [{ action: 'accept', content: { approve: true, note: 'from a person' } }, { action: 'decline' }];
      const outputs: unknown[] = [];
      for (const [index, response] of answers.entries()) {
        const agent = new Agent({ name: 'ops', tools, model: new ScriptedModel([echoToolOutputs]) });
        const state = await RunState.fromString(agent, saved[index]!);
        const [item] = state.getInterruptions();
        await answerInterruption(second, state, item!, response);
        // answered: the interruption no longer stands for a question, and a second answer is refused
        expect(await interruptionInput(second, item!)).toBeUndefined();
        await expect(answerInterruption(second, state, item!, response)).rejects.toThrow(/no task's pending input/);
        outputs.push((await runner.run(agent, state)).finalOutput);
      }
      expect(outputs).toEqual(['Deployed to staging (from a person)', 'Deployment to qa was not approved']);
      for (const callId of ['fc-answer-1', 'fc-answer-2']) {
        const taskId = (await second.get(`openai-agents:${callId}`))?.taskId;
        expect(runsOf(serve.runLog, taskId!)).toHaveLength(1);
      }
    } finally {
      await second.close();
    }
  });
});

describe('closeout/openai-agents: the ends the demo tools lack', { timeout: 90_000 }, () => {
  it('gives the model a result with structured content and no text as that content, JSON', async () => {
    const tools = await openAIAgentsTaskTools(outcomes.client, { tools: ['measure'] });
    const { agent } = scriptedAgent(tools, 'measure', {}, 'fc-measure');
    expect((await runner.run(agent, 'Measure')).finalOutput).toBe('{"widths":[3,4],"unit":"cm"}');
  });

  it('gives the model a task cancelled by another client and one that expired as distinct error outputs', async () => {
    const tools = await openAIAgentsTaskTools(outcomes.client, { tools: ['wait'] });
    const waiting = runner.run(scriptedAgent(tools, 'wait', {}, 'fc-wait').agent, 'Wait');
    const taskId = await outcomes.cancelFromAnotherClient('openai-agents:fc-wait');
    expect((await waiting).finalOutput).toBe(`task ${taskId} was cancelled`);
    // a replay of a call whose task the server has forgotten since (past its TTL and retention)
    const ledger = join(outcomes.dir, 'replay-ledger.db');
    const forgotten = await outcomes.forgottenTask(ledger, 'outlive_ttl', 'openai-agents:fc-ttl');
    const replaying = await connectHttpTaskClient(outcomes.server.url, { ledger });
    try {
      const replayTools = await openAIAgentsTaskTools(replaying, { tools: ['outlive_ttl'] });
      const replay = await runner.run(scriptedAgent(replayTools, 'outlive_ttl', {}, 'fc-ttl').agent, 'Outlive');
      expect(replay.finalOutput).toMatch(new RegExp(`^task ${forgotten} expired: `));
    } finally {
      await replaying.close();
    }
  });
});

/** The answers the ledger at `ledger` holds for the call `key`'s task. */
async function answersOf(ledger: string, key: string): Promise<Array<{ key: string; response: unknown }>> {
  const client: TaskClient = await connectHttpTaskClient(serve.server.url, { ledger });
  try {
    const record = await client.get(key);
    return (record?.inputs ?? []).map((input) => ({ key: input.key, response: input.response }));
  } finally {
    await client.close();
  }
}

/**
 * Another process restores the run saved in `stateFile` (RunState.fromString), reads the question of its interruption
 * from the ledger, approves it and runs on with a scripted model that echoes the tool's output.
 */
async function resumeApproved(
  ledger: string,
  stateFile: string,
  options: object,
): Promise<{ question?: unknown; finalOutput?: unknown; interruptions: number }> {
  const child = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
      import { readFileSync } from 'node:fs';
      import { Agent, Runner, RunState } from '@openai/agents-core';
      import { assistantMessage, modelResponder, ScriptedModel } from '@openai/agents-core/testing';
      const { connectHttpTaskClient } = await import(${JSON.stringify(CLIENT)});
      const { interruptionInput, openAIAgentsTaskTools } = await import(${JSON.stringify(ADAPTER)});
      const options = ${JSON.stringify(options)};
      const client = await connectHttpTaskClient(${JSON.stringify(serve.server.url)}, {
        ledger: ${JSON.stringify(ledger)},
        capabilities: { elicitation: {} },
      });
      const echo = modelResponder((call) => [
        assistantMessage(call.request.input.filter((item) => item.type === 'function_call_result').map((item) => item.output.text).join('\\n')),
      ]);
      const agent = new Agent({ name: 'ops', tools: await openAIAgentsTaskTools(client, options), model: new ScriptedModel([echo]) });
      const state = await RunState.fromString(agent, readFileSync(${JSON.stringify(stateFile)}, 'utf8'));
      const [item] = state.getInterruptions();
      const question = await interruptionInput(client, item, options);
      state.approve(item);
      const result = await new Runner({ tracingDisabled: true }).run(agent, state);
      await client.close();
      process.stdout.write(JSON.stringify({ question, finalOutput: result.finalOutput, interruptions: result.interruptions.length }));
      `,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise((resolve) => child.once('exit', resolve));
  expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  return JSON.parse(stdout) as { question?: unknown; finalOutput?: unknown; interruptions: number };
}
