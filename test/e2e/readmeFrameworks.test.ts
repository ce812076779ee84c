/**
 * README.md's agent-framework examples ("Durable tools in agent frameworks") run as written against README's server
 * example, each in its own process of a user's project, taken from the README's code blocks. Two changes only, each
 * where the README writes it once: the server's URL (its port is free, not 3000), and the example's `model` (a
 * network model) becomes the framework's scripted test model: the AI SDK's MockLanguageModelV4 and the Agents SDK's
 * ScriptedModel, each calling `batch_job` with `{ items: 3 }` and then replying with the text of the tool's result, so
 * "published to web" in the output is the task's result as the model's next step read it. The LangChain example has
 * no model: it calls the tool as LangGraph's ToolNode does, as README says.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { runCli } from '../support/cli.js';
import {
  cleanUp,
  examples,
  type Exited,
  javascript,
  replaceOnce,
  runToEnd,
  type Started,
  startReadmeServer,
  userProject,
} from '../support/readmeExamples.js';

/** The AI SDK's mock model: a call of `batch_job`, then, once the prompt holds tool results, their texts. */
const AI_SDK_MODEL = `
import { MockLanguageModelV4 } from 'ai/test';
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};
export default new MockLanguageModelV4({
  doGenerate: async ({ prompt }) => {
    const results = prompt.filter((m) => m.role === 'tool').flatMap((m) => m.content).filter((p) => p.type === 'tool-result');
    if (results.length === 0) {
      const input = JSON.stringify({ items: 3 });
      const content = [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'batch_job', input }];
      return { content, finishReason: { unified: 'tool-calls', raw: undefined }, usage, warnings: [] };
    }
    const text = results.map((p) => (p.output.type === 'json' ? p.output.value.text : JSON.stringify(p.output))).join('\\n');
    return { content: [{ type: 'text', text }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] };
  },
});
`;

/** The Agents SDK's scripted model: a function call of `batch_job`, then the text of each tool output it was given. */
const AGENTS_MODEL = `
import { assistantMessage, functionCall, modelResponder, ScriptedModel } from '@openai/agents-core/testing';
const echo = modelResponder((call) => [
  assistantMessage(
    (typeof call.request.input === 'string' ? [] : call.request.input)
      .filter((item) => item.type === 'function_call_result')
      .map((item) => (typeof item.output === 'string' ? item.output : item.output.text))
      .join('\\n'),
  ),
]);
export default new ScriptedModel([[functionCall('batch_job', { items: 3 }, { callId: 'call-1' })], echo]);
`;

let dir: string;
let server: Started | undefined;
let url: string;

beforeAll(async () => {
  dir = await userProject('closeout-readme-frameworks-', ['zod', 'ai', '@openai/agents-core', '@langchain/core']);
  await writeFile(join(dir, 'ai-sdk-model.mjs'), AI_SDK_MODEL);
  await writeFile(join(dir, 'agents-model.mjs'), AGENTS_MODEL);
  ({ server, url } = await startReadmeServer(dir));
}, 60_000);

afterAll(async () => {
  await cleanUp(server, dir);
});

/** The one README example that imports `entry`, with the server's URL and (when given) its model replaced, run. */
async function runExample(entry: string, model?: { from: string; module: string }): Promise<Exited> {
  const found = await examples(`from '${entry}'`);
  expect(found, `one example of ${entry}`).toHaveLength(1);
  let code = replaceOnce(found[0]!, "'http://127.0.0.1:3000/mcp'", JSON.stringify(url));
  if (model) code = replaceOnce(code, model.from, `(await import('./${model.module}')).default`);
  const file = `${entry.replace(/\W/g, '-')}.mjs`;
  await writeFile(join(dir, file), javascript(code));
  return runToEnd(file, dir);
}

/** The ledger's record of the adapter's call (by its idempotency key) and its statuses, from `closeout show --json`. */
async function recordOf(key: string): Promise<{ record: Record<string, unknown>; statuses: string[] }> {
  const shown = await runCli(['show', key, '--ledger', join(dir, 'agent-ledger.db'), '--json'], {
    timeoutMs: 60_000,
  });
  expect(shown.code, shown.stderr).toBe(0);
  const { record, history } = JSON.parse(shown.stdout) as {
    record: Record<string, unknown>;
    history: Array<{ status?: string }>;
  };
  return { record, statuses: history.flatMap((entry) => (entry.status ? [entry.status] : [])) };
}

/** The call ran as a task of the server example that asked its question and completed. */
async function expectTask(key: string): Promise<void> {
  const { record, statuses } = await recordOf(key);
  expect(record).toMatchObject({ taskId: expect.any(String), status: 'completed' });
  expect(statuses).toContain('input_required');
}

describe("README.md's agent-framework examples", { timeout: 120_000 }, () => {
  it('the AI SDK example: generateText calls batch_job, and the model reads the task result', async () => {
    const run = await runExample('closeout/ai-sdk', { from: "'openai/gpt-5'", module: 'ai-sdk-model.mjs' });
    expect(run, run.stderr).toMatchObject({ code: 0, signal: null, stderr: '' });
    expect(run.stdout.trim()).toBe('published to web');
    await expectTask('ai-sdk:chat-42:call-1');
  });

  it("the OpenAI Agents example: run() calls batch_job, and the agent's final output is the task result", async () => {
    const run = await runExample('closeout/openai-agents', { from: "'gpt-5'", module: 'agents-model.mjs' });
    expect(run, run.stderr).toMatchObject({ code: 0, signal: null, stderr: '' });
    expect(run.stdout.trim()).toBe('published to web');
    await expectTask('openai-agents:conversation-42:call-1');
  });

  it("the LangChain example: the tool, called as a ToolNode calls it, returns the task's result", async () => {
    const run = await runExample('closeout/langchain');
    expect(run, run.stderr).toMatchObject({ code: 0, signal: null, stderr: '' });
    expect(run.stdout.trim()).toBe('published to web');
    await expectTask('langchain:call-1');
  });

  it('the server example served them all without a complaint', () => {
    expect(server!.stderr()).toBe('');
  });
});
