// Push on the client (docs/client.md, "Push"), over real HTTP against a real Closeout server on SQLite: one
// `subscriptions/listen` stream carries every open task and closes them out without a single tasks/get; a stream cut
// mid-way is opened again and each task is queried exactly once before the stream is trusted again; a server that
// does not push, or agrees to none of the ids, leaves the client polling as before; a client with push off never
// subscribes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { TaskClient, TaskClientEvent } from '../../src/client/index.js';
import { connectHttpTaskClient } from '../../src/client/index.js';
import type { ServingTaskServer } from '../../src/server/http.js';
import { serveTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { waitFor } from '../support/waitFor.js';
import { task, textOf } from './fixtures/clientHarness.js';
import { startTasksFixture } from './fixtures/tasksFixtureServer.js';

/** A long pollIntervalMs: a task this test sees closed within seconds was closed by push, not by a poll. */
const SLOW_POLL_MS = 60_000;

interface Sent {
  method: string;
  name: string | undefined;
  /** When the request was sent (Date.now()). */
  at: number;
}

let dir = '';
let serving: ServingTaskServer | undefined;
let store: SqliteTaskStore | undefined;
const clients: TaskClient[] = [];
/** Releases every `gated` task that is waiting. */
let openGates: () => void = () => undefined;
/** The gate of each waiting `single` task, by its `n`. */
const singles = new Map<number, () => void>();

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-push-'));
});
afterEach(async () => {
  openGates();
  for (const open of singles.values()) open();
  singles.clear();
  for (const client of clients.splice(0)) await client.close();
  await serving?.close();
  await store?.close();
  serving = undefined;
  store = undefined;
  rmSync(dir, { recursive: true, force: true });
});

async function startServer(): Promise<ServingTaskServer> {
  store = new SqliteTaskStore(join(dir, 'tasks.db'));
  const tasks = new TaskServer({ store });
  let gates: Array<() => void> = [];
  openGates = () => {
    for (const open of gates.splice(0)) open();
  };
  tasks.registerTool('gated', { task: { support: 'required', pollIntervalMs: SLOW_POLL_MS } }, async (args) => {
    await new Promise<void>((resolve) => gates.push(resolve));
    return { content: [{ type: 'text', text: `gated ${String(args['n'])} done` }] };
  });
  // one gate per n: tasks finish one at a time
  tasks.registerTool('single', { task: { support: 'required', pollIntervalMs: SLOW_POLL_MS } }, async (args) => {
    await new Promise<void>((resolve) => singles.set(Number(args['n']), resolve));
    return { content: [{ type: 'text', text: `single ${String(args['n'])} done` }] };
  });
  // the server asks for a poll every 50 ms
  tasks.registerTool('eager', { task: { support: 'required', pollIntervalMs: 50 } }, async () => {
    await new Promise<void>((resolve) => gates.push(resolve));
    return { content: [{ type: 'text', text: 'eager done' }] };
  });
  serving = await serveTaskServer(tasks, { port: 0, host: '127.0.0.1' });
  gates = [];
  return serving;
}

/** A client whose every HTTP request is counted by its Mcp-Method and Mcp-Name headers. */
async function connect(
  url: string | URL,
  options: {
    push?: Parameters<typeof connectHttpTaskClient>[1]['push'];
    events?: TaskClientEvent[];
    capMs?: number;
  } = {},
): Promise<{ client: TaskClient; sent: Sent[] }> {
  const sent: Sent[] = [];
  const counting: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    const method = headers.get('mcp-method');
    if (method) sent.push({ method, name: headers.get('mcp-name') ?? undefined, at: Date.now() });
    return fetch(input, init);
  };
  const client = await connectHttpTaskClient(url, {
    ledger: join(dir, 'ledger.db'),
    fetch: counting,
    pollPolicy: { floorMs: 10, tickMs: 0, ...(options.capMs !== undefined && { capMs: options.capMs }) },
    push: options.push,
    onEvent: (event) => options.events?.push(event),
  });
  clients.push(client);
  return { client, sent };
}

const count = (sent: Sent[], method: string, name?: string) =>
  sent.filter((each) => each.method === method && (name === undefined || each.name === name)).length;

describe('push against a Closeout server', () => {
  it('closes out tasks from notifications alone: one stream for all of them, not a single tasks/get', async () => {
    const server = await startServer();
    const events: TaskClientEvent[] = [];
    const { client, sent } = await connect(server.url, { events });
    const handles = [];
    for (let n = 0; n < 3; n++) handles.push(await task(client, 'gated', { n }));
    await waitFor('the stream to carry all three tasks', () => {
      const state = client.pushState();
      return state.mode === 'push' && state.tasks === 3 ? state : undefined;
    });
    openGates();
    const results = await Promise.all(handles.map((handle) => handle.result()));
    expect(results.map(textOf)).toEqual(['gated 0 done', 'gated 1 done', 'gated 2 done']);
    expect(count(sent, 'tasks/get')).toBe(0);
    // the set grew one task at a time, but renewals are batched and never one stream per task
    expect(count(sent, 'subscriptions/listen')).toBeLessThanOrEqual(3);
    expect(events.some((event) => event.type === 'push' && event.state.mode === 'push')).toBe(true);
    // every record went through the same observation path as a poll: history and close-out as usual
    for (const handle of handles) {
      const history = await client.history(handle.taskId);
      expect(history.map((entry) => entry.status ?? entry.localState)).toContain('completed');
      expect((await client.get(handle.taskId))?.localState).toBe('terminal');
    }
  });

  it('keeps the stream as tasks close: a smaller set is not a reason to send every open task again', async () => {
    // a renewal sends the state of every task it carries; renewing as each of 1,000 tasks closed sent 1,000 states per
    // close and made push later than polling under load (bench/RESULTS.md, push lateness)
    const server = await startServer();
    const { client, sent } = await connect(server.url);
    const handles = [];
    for (let n = 0; n < 3; n++) handles.push(await task(client, 'single', { n }));
    await waitFor('the stream to carry all three tasks, and every gate to wait', () => {
      const state = client.pushState();
      return state.mode === 'push' && state.tasks === 3 && singles.size === 3 ? state : undefined;
    });
    const listens = count(sent, 'subscriptions/listen');
    for (const [n, handle] of handles.entries()) {
      singles.get(n)!();
      expect(textOf(await handle.result())).toBe(`single ${n} done`);
      // longer than the renewal delay (50 ms): a renewal would have been sent by now
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(count(sent, 'subscriptions/listen')).toBe(listens);
      expect(client.pushState()).toMatchObject(n < 2 ? { mode: 'push', tasks: 2 - n } : { mode: 'polling' });
    }
    expect(count(sent, 'tasks/get')).toBe(0);
  });

  it('opens the stream again after it is cut, and queries each task exactly once before trusting it', async () => {
    const server = await startServer();
    const { client, sent } = await connect(server.url);
    const first = await task(client, 'gated', { n: 1 });
    const second = await task(client, 'gated', { n: 2 });
    await waitFor('the stream to carry both tasks', () => {
      const state = client.pushState();
      return state.mode === 'push' && state.tasks === 2 ? state : undefined;
    });
    const listensBefore = count(sent, 'subscriptions/listen');
    expect(count(sent, 'tasks/get')).toBe(0);

    // a real cut: every TCP connection to the server, the stream's among them, is closed under the client
    server.http.closeAllConnections();

    await waitFor('a new stream and one tasks/get per task', () =>
      count(sent, 'subscriptions/listen') > listensBefore &&
      count(sent, 'tasks/get', first.taskId) === 1 &&
      count(sent, 'tasks/get', second.taskId) === 1 &&
      client.pushState().mode === 'push'
        ? true
        : undefined,
    );
    openGates();
    expect(textOf(await first.result())).toBe('gated 1 done');
    expect(textOf(await second.result())).toBe('gated 2 done');
    // closed by push after the gap was closed: still exactly one tasks/get each
    expect(count(sent, 'tasks/get', first.taskId)).toBe(1);
    expect(count(sent, 'tasks/get', second.taskId)).toBe(1);
    // the state the new stream sent and the gap poll's answer were the same: one observation, one history entry
    for (const handle of [first, second]) {
      const history = await client.history(handle.taskId);
      expect(history.filter((entry) => entry.status === 'working')).toHaveLength(1);
    }
  });

  it('keeps polling a pushed task, at the safety interval instead of the server’s pollIntervalMs', async () => {
    const server = await startServer();
    const { client, sent } = await connect(server.url, { push: { safetyPollMs: 600 } });
    const handle = await task(client, 'eager');
    await waitFor('the stream to carry the task', () => (client.pushState().mode === 'push' ? true : undefined));
    const started = Date.now();
    const polls = () => sent.filter((each) => each.method === 'tasks/get' && each.name === handle.taskId);
    const before = polls().length;
    await waitFor('two polls sent after the stream was up', () => (polls().length - before >= 2 ? true : undefined));
    const elapsed = Date.now() - started;
    // at the server's 50 ms that many seconds would have been dozens of polls
    expect(polls().length - before).toBeLessThanOrEqual(Math.ceil(elapsed / 600) + 2);
    // a poll sent once the stream is up is answered into a trusted task, whose next poll waits the safety interval
    const [first, second] = polls().slice(before);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(600);
    openGates();
    expect(textOf(await handle.result())).toBe('eager done');
  });

  it('spreads the safety polls of many pushed tasks: together at most safetyPollsPerSecond, past the poll cap', async () => {
    // 10,000 pushed tasks polled every safetyPollMs would cost a client a quarter of a core (bench/RESULTS.md, 11)
    const server = await startServer();
    const tasks = 20;
    const perSecond = 4;
    const { client, sent } = await connect(server.url, {
      push: { safetyPollMs: 100, safetyPollsPerSecond: perSecond },
      // a cap far under the spread interval (tasks / perSecond = 5 s): the stream, not the cap, decides
      capMs: 300,
    });
    for (let i = 0; i < tasks; i++) await task(client, 'eager');
    await waitFor('the stream to carry every task', () => {
      const state = client.pushState();
      return state.mode === 'push' && state.tasks === tasks ? true : undefined;
    });
    const polledBefore = count(sent, 'tasks/get');
    const started = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const seconds = (Date.now() - started) / 1000;
    const polls = count(sent, 'tasks/get') - polledBefore;
    // at most the rate, plus one poll per task for those scheduled as the stream became trusted for them one by one
    expect(polls).toBeLessThanOrEqual(Math.ceil(perSecond * seconds) + tasks);
    openGates();
  });

  it('never subscribes with push turned off, and polls as before', async () => {
    const server = await startServer();
    const { client, sent } = await connect(server.url, { push: { enabled: false } });
    const handle = await task(client, 'gated', { n: 7 });
    openGates();
    // the first poll comes at the server's pollIntervalMs (a minute): refresh asks now, as a poll would
    await waitFor('the task to finish on the server', async () => {
      const record = await client.refresh(handle.taskId);
      return record.localState === 'terminal' ? record : undefined;
    });
    expect(textOf(await handle.result())).toBe('gated 7 done');
    expect(count(sent, 'subscriptions/listen')).toBe(0);
    expect(client.pushState()).toEqual({ mode: 'polling', reason: 'push is turned off for this client' });
  });
});

describe('push against servers that do not push', () => {
  it('polls a server without subscriptions/listen exactly as before, and asks it once', async () => {
    const fixture = await startTasksFixture();
    try {
      const { client, sent } = await connect(fixture.url);
      const handle = await task(client, 'slow', { n: 1 });
      expect(textOf(await handle.result())).toContain('slow done');
      // the fixture advances one step per tasks/get: four polls, as without push
      expect(fixture.count('tasks/get')).toBe(4);
      expect(count(sent, 'subscriptions/listen')).toBe(1);
      expect(client.pushState().mode).toBe('polling');
      // more tasks do not ask again: the server said it does not push
      const more = await task(client, 'slow', { n: 2 });
      await more.result();
      expect(count(sent, 'subscriptions/listen')).toBe(1);
    } finally {
      for (const client of clients.splice(0)) await client.close();
      await fixture.close();
    }
  });

  for (const listen of ['agree-none', 'no-task-ids'] as const) {
    it(`falls back to polling when the acknowledgement ${listen === 'agree-none' ? 'agrees to no id' : 'has no taskIds'}`, async () => {
      const fixture = await startTasksFixture({ listen });
      try {
        const { client, sent } = await connect(fixture.url);
        const handle = await task(client, 'slow', { n: 1 });
        expect(textOf(await handle.result())).toContain('slow done');
        expect(fixture.count('tasks/get')).toBe(4);
        expect(count(sent, 'subscriptions/listen')).toBe(1);
        const state = client.pushState();
        expect(state.mode).toBe('polling');
        expect(state.mode === 'polling' && state.reason).toMatch(
          listen === 'agree-none' ? /agreed to push none/ : /does not push/,
        );
      } finally {
        for (const client of clients.splice(0)) await client.close();
        await fixture.close();
      }
    });
  }
});
