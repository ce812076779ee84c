// Invariants (core basic/patterns/mrtr, "Client Requirements"; basic/index "ResultType"): an InputRequiredResult
// answering tools/call is fulfilled through the TaskClient's input handlers and the call retried on a new JSON-RPC id
// with the responses and exactly the requestState given (none when none was given), until the server answers with a
// result or a task; a call whose input this client cannot give ends with a clear error, never `unknown-outcome`; and a
// result without `resultType` is a complete result, on tools/call and on tasks/get.

import type { CallToolResult } from '@modelcontextprotocol/client';
import { describe, expect, it } from 'vitest';

import type { PollPolicy } from '../../src/client/index.js';
import { isTaskHandle, TaskClientError } from '../../src/client/index.js';
import { textOf, useClientHarness } from './fixtures/clientHarness.js';

const FAST: Partial<PollPolicy> = { floorMs: 5, capMs: 100, defaultIntervalMs: 20, jitterRatio: 0.1 };

const harness = useClientHarness('mrtr', FAST);

const answering = (values: Record<string, string>, asked: string[] = []) => ({
  elicitation: (request: { params: { message?: string } }, context: { key: string; taskId: string | undefined }) => {
    asked.push(`${context.key}:${context.taskId ?? 'no task'}`);
    return { action: 'accept' as const, content: { value: values[context.key] ?? '?' } };
  },
});

const callsOf = (tool: string) =>
  harness.fixture.requests.filter((request) => request.method === 'tools/call' && request.params['name'] === tool);

describe('MRTR on tools/call', () => {
  it('fulfils the input through the handlers and retries with the responses and the echoed requestState', async () => {
    const asked: string[] = [];
    const client = await harness.connect({ inputHandlers: answering({ name: 'Ada' }, asked) });
    const answer = await client.callTool('mrtr-plain', { x: 1 }, { idempotencyKey: 'mrtr-key-1' });
    expect(isTaskHandle(answer)).toBe(false);
    expect(textOf(answer as CallToolResult)).toBe('hello Ada');
    expect(asked).toEqual(['name:no task']);

    const [first, retry] = callsOf('mrtr-plain');
    expect(callsOf('mrtr-plain')).toHaveLength(2);
    expect(first!.params).not.toHaveProperty('inputResponses');
    expect(first!.params).not.toHaveProperty('requestState');
    // spec: a new JSON-RPC id; the same call; the state echoed byte for byte
    expect(retry!.id).not.toEqual(first!.id);
    expect(retry!.params['arguments']).toEqual({ x: 1 });
    expect(retry!.params['requestState']).toBe('r1');
    expect(retry!.params['inputResponses']).toEqual({ name: { action: 'accept', content: { value: 'Ada' } } });
    // the retry carries the idempotency key the first round carried (derived from 'mrtr-key-1' with the ledger's secret)
    const keyOf = (request: typeof retry) =>
      (request!.params['_meta'] as Record<string, unknown>)['io.closeout/idempotencyKey'];
    expect(keyOf(retry)).toMatch(/^ck1\./);
    expect(keyOf(retry)).toBe(keyOf(first));

    const [record] = await client.list();
    expect(record).toMatchObject({ localState: 'terminal', terminalReason: 'immediate result' });
  });

  it('sends no requestState in a round whose InputRequiredResult gave none, and only that round’s responses', async () => {
    const client = await harness.connect({ inputHandlers: answering({ name: 'Ada', confirm: 'yes' }) });
    const answer = await client.callTool('mrtr-rounds', {});
    expect(textOf(answer as CallToolResult)).toBe('hello yes');
    const legs = callsOf('mrtr-rounds');
    expect(legs).toHaveLength(3);
    expect(new Set(legs.map((leg) => leg.id)).size).toBe(3);
    expect(legs[1]!.params['requestState']).toBe('r1');
    expect(legs[2]!.params).not.toHaveProperty('requestState');
    expect(legs[2]!.params['inputResponses']).toEqual({ confirm: { action: 'accept', content: { value: 'yes' } } });
  });

  it('retries a requestState-only answer with the state and no inputResponses', async () => {
    const client = await harness.connect();
    const answer = await client.callTool('mrtr-state-only', {});
    expect(textOf(answer as CallToolResult)).toBe('hello shed-load');
    const legs = callsOf('mrtr-state-only');
    expect(legs).toHaveLength(2);
    expect(legs[1]!.params['requestState']).toBe('shed-load');
    expect(legs[1]!.params).not.toHaveProperty('inputResponses');
  });

  it('follows the task the server creates once the input is in', async () => {
    const client = await harness.connect({ inputHandlers: answering({ name: 'Grace' }) });
    const answer = await client.callTool('mrtr-task', {});
    expect(isTaskHandle(answer)).toBe(true);
    if (!isTaskHandle(answer)) return;
    const outcome = await answer.result();
    expect(textOf(outcome)).toBe('mrtr-task done');
    expect(harness.fixture.tasks.get(answer.taskId)?.arguments).toMatchObject({ answered: 'Grace' });
  });

  it('ends a call whose input it cannot give with a clear error, not unknown-outcome', async () => {
    const client = await harness.connect({ inputHandlers: answering({}) });
    const error = await client.callTool('mrtr-sampling', {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TaskClientError);
    expect((error as TaskClientError).code).toBe('input-unavailable');
    expect((error as Error).message).toContain('input model (sampling/createMessage)');
    expect(callsOf('mrtr-sampling')).toHaveLength(1);
    const [record] = await client.list();
    expect(record?.localState).toBe('terminal');
    expect(record?.terminalReason).toContain('tools/call needs input this client could not give');
  });
});

describe('an absent resultType is "complete"', () => {
  it('takes a tools/call result without resultType as the result', async () => {
    const client = await harness.connect();
    const answer = await client.callTool('no-resulttype', {});
    expect(textOf(answer as CallToolResult)).toBe('no resultType here');
    expect((await client.list())[0]?.localState).toBe('terminal');
  });

  it('takes a tasks/get answer without resultType as the task', async () => {
    const client = await harness.connect();
    const handle = await client.callTool('get-no-resulttype', {});
    if (!isTaskHandle(handle)) throw new Error('no task');
    expect(textOf(await handle.result())).toBe('get-no-resulttype done');
    expect((await client.get(handle.taskId))?.lastError).toBeUndefined();
  });
});
