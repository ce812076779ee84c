// An elicitation answered without a prompt: the preset answer fills the form's defaults and refuses a form whose
// required fields it lacks; a URL-mode request is shown (attributed to its server) and never opened; without a
// terminal or a preset, the task is let go rather than answered.
import type { ElicitRequest, ElicitResult } from '@modelcontextprotocol/client';
import { describe, expect, it } from 'vitest';

import type { InputHost, PresetAnswer } from '../../src/cli/terminal/elicitationPrompt.js';
import { elicitationHandler, fromPreset, presetFrom, promptQueue } from '../../src/cli/terminal/elicitationPrompt.js';
import { Output } from '../../src/cli/terminal/output.js';
import type { TaskInputContext } from '../../src/client/index.js';

const FORM = {
  mode: 'form' as const,
  message: 'Deploy?',
  requestedSchema: {
    properties: { approve: { type: 'boolean', default: true }, note: { type: 'string' } },
    required: ['approve'],
  },
};

function capture(): { stream: NodeJS.WriteStream; text: () => string } {
  let text = '';
  const stream = { write: (chunk: string) => ((text += chunk), true), isTTY: false } as unknown as NodeJS.WriteStream;
  return { stream, text: () => text };
}

function context(signal: AbortSignal): TaskInputContext {
  return {
    taskId: 'task-1',
    recordId: 'record-1',
    key: 'approval',
    toolName: 'approve_deploy',
    correlationId: undefined,
    previouslyAsked: false,
    signal,
  };
}

function host(out: Output, preset: PresetAnswer | undefined, needs: string[]): InputHost {
  return {
    out,
    preset,
    interactive: false,
    exclusive: promptQueue(),
    interrupt: () => undefined,
    needsInput: (_recordId, why) => needs.push(why),
  };
}

describe('elicitation without a prompt', () => {
  it('fills the form’s defaults under the preset content, and names missing required fields', async () => {
    expect(await fromPreset({ action: 'accept', content: { note: 'x' } }, FORM)).toEqual({
      action: 'accept',
      content: { approve: true, note: 'x' },
    });
    const strict = { ...FORM, requestedSchema: { ...FORM.requestedSchema, required: ['approve', 'note'] } };
    expect(await fromPreset({ action: 'accept', content: {} }, strict)).toBe(
      '--accept lacks the required field(s) note',
    );
    expect(await fromPreset({ action: 'decline' }, FORM)).toEqual({ action: 'decline' });
    expect(() => presetFrom({ accept: {}, dismiss: true })).toThrow('pass only one of');
    expect(presetFrom({ dismiss: true })).toEqual({ action: 'cancel' });
  });

  it('shows a URL-mode request as the server’s words and accepts it without opening anything', async () => {
    const stdout = capture();
    const out = new Output({}, stdout.stream, capture().stream);
    const ask = elicitationHandler(host(out, { action: 'accept', content: {} }, []), 'http://server.example/mcp');
    const request = {
      method: 'elicitation/create',
      params: {
        mode: 'url',
        message: 'Sign in\u001b[2J',
        url: 'https://auth.example/\u001b]0;x\u0007start',
        elicitationId: 'e1',
      },
    } as unknown as ElicitRequest;
    const answer: ElicitResult = await ask(request, context(new AbortController().signal));
    expect(answer).toEqual({ action: 'accept' });
    expect(stdout.text()).toContain('input requested by http://server.example/mcp for task task-1 (approve_deploy)');
    expect(stdout.text()).toContain('  │ Sign in\n');
    expect(stdout.text()).toContain('it asks you to open https://auth.example/start');
    expect(stdout.text()).toContain('closeout does not open links');
    expect(stdout.text()).not.toContain('\u001b');
  });

  it('lets the task go when it cannot ask anyone, and records no answer', async () => {
    const out = new Output({ json: true }, capture().stream, capture().stream);
    const needs: string[] = [];
    const ask = elicitationHandler(host(out, undefined, needs), 'http://server.example/mcp');
    const controller = new AbortController();
    const pending = ask(
      { method: 'elicitation/create', params: FORM } as unknown as ElicitRequest,
      context(controller.signal),
    );
    await Promise.resolve();
    expect(needs).toEqual(['stdin is not a terminal and no --accept, --decline or --dismiss was given']);
    controller.abort(new Error('detached'));
    await expect(pending).rejects.toThrow('detached');
  });
});
