// An input handler that throws (docs/client.md, "Input"): each failure is recorded on the record (its last error and
// a line of its history), told as an `error` event and to the handle's onChange listeners; the handler is asked again
// a bounded number of times with growing pauses while the task still needs the input, and once those are spent the
// question stays answerable by `client.answer()`; never asked twice once answered.
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import type { RecordedError, TaskClient, TaskRecord } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle } from '../../src/client/index.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

async function approvalServer(): Promise<TestServer> {
  const server = await startTestServer((tasks) => {
    tasks.registerTool('approve', { task: { support: 'required', pollIntervalMs: 50 } }, async (_args, ctx) => {
      const answer = await ctx.input('go', {
        method: 'elicitation/create',
        params: { mode: 'form', message: 'Go?', requestedSchema: { type: 'object', properties: {} } },
      });
      return { content: [{ type: 'text', text: String(answer['action']) }] };
    });
  });
  cleanup.push(() => server.close());
  return server;
}

async function client(server: TestServer, failures: number, errors: RecordedError[], asked: { n: number }) {
  const made: TaskClient = await connectHttpTaskClient(server.url, {
    ledger: join(server.dir, 'ledger.db'),
    pollPolicy: { floorMs: 10, defaultIntervalMs: 50, capMs: 200 },
    onEvent: (event) => event.type === 'error' && errors.push(event.error),
    inputHandlers: {
      elicitation: () => {
        asked.n += 1;
        if (asked.n <= failures) throw new Error(`the approval service is down (${asked.n})`);
        return { action: 'accept', content: {} };
      },
    },
  });
  cleanup.push(() => made.close());
  return made;
}

describe('an input handler that throws', { timeout: 60_000 }, () => {
  it('is asked again after a pause, and the task goes on once it answers', async () => {
    const server = await approvalServer();
    const errors: RecordedError[] = [];
    const asked = { n: 0 };
    const tasks = await client(server, 2, errors, asked);
    const handle = await tasks.callTool('approve', {});
    if (!isTaskHandle(handle)) throw new Error('approve answered without a task');
    const seen: TaskRecord[] = [];
    handle.onChange((record) => seen.push(record));
    expect(await handle.outcome()).toMatchObject({ kind: 'completed' });
    expect(asked.n).toBe(3);
    const failures = [
      expect.stringMatching(
        /input go .*the handler failed \(attempt 1 of 3\): the approval service is down \(1\); asked again in 2 s/,
      ),
      expect.stringMatching(/attempt 2 of 3\): the approval service is down \(2\); asked again in 4 s/),
    ];
    expect(errors.map((e) => e.message)).toEqual(failures);
    // each failure reached the handle: its listeners got the record with the failure as lastError (which later
    // records go on carrying until another error replaces it)
    const told = new Set(seen.filter((r) => r.lastError?.kind === 'input').map((r) => r.lastError!.message));
    expect([...told]).toEqual(failures);
    // and is a line of the record's history, where lastError keeps only the last
    const lines = (await tasks.history(handle.recordId)).filter((entry) => /handler failed/.test(entry.note ?? ''));
    expect(lines.map((entry) => entry.note)).toEqual(failures);
    expect(lines[0]).toMatchObject({ status: 'input_required', localState: 'tracking', taskId: handle.taskId });
  });

  it('once its attempts are spent, leaves the question to client.answer(), asked no more', async () => {
    const server = await approvalServer();
    const errors: RecordedError[] = [];
    const asked = { n: 0 };
    const tasks = await client(server, Infinity, errors, asked);
    const handle = await tasks.callTool('approve', {});
    if (!isTaskHandle(handle)) throw new Error('approve answered without a task');
    await waitFor('three attempts', () => (errors.length === 3 ? true : undefined), 20_000);
    expect(errors[2]!.message).toMatch(
      /attempt 3 of 3\).*not asked again in this process: answer it with TaskClient\.answer/,
    );
    expect((await tasks.get(handle.recordId))?.lastError?.message).toBe(errors[2]!.message);
    const history = await tasks.history(handle.recordId);
    expect(history.filter((entry) => /handler failed/.test(entry.note ?? '')).map((entry) => entry.note)).toEqual(
      errors.map((e) => e.message),
    );
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(asked.n).toBe(3);
    expect(await tasks.answer(handle.taskId, 'go', { action: 'decline' })).toBe(true);
    expect(await handle.outcome()).toMatchObject({ kind: 'completed' });
    expect(asked.n).toBe(3);
  });
});
