// Progress reaches the application: every status message a task reports while it works ("Migrated 2 of 3") reaches
// `onEvent` as a `status` event and `handle.onChange()` listeners, not only changes of status (docs/client.md, "Progress").
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import type { TaskClient, TaskClientEvent } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle } from '../../src/client/index.js';
import { startTestServer, type TestServer } from '../support/testServer.js';

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

describe('progress of a working task', () => {
  it('reaches onEvent and onChange with each new status message', async () => {
    const server: TestServer = await startTestServer((tasks) => {
      tasks.registerTool('migrate', { task: { support: 'required', pollIntervalMs: 20 } }, async (_args, ctx) => {
        for (let i = 1; i <= 3; i++) {
          await ctx.status(`Migrated ${i} of 3`);
          await new Promise((resolve) => setTimeout(resolve, 400));
        }
        return { content: [{ type: 'text', text: 'migrated' }] };
      });
    });
    cleanup.push(() => server.close());
    const events: TaskClientEvent[] = [];
    const client: TaskClient = await connectHttpTaskClient(server.url, {
      ledger: join(server.dir, 'ledger.db'),
      pollPolicy: { floorMs: 10, defaultIntervalMs: 20, capMs: 50 },
      onEvent: (event) => events.push(event),
    });
    cleanup.push(() => client.close());

    const handle = await client.callTool('migrate', {});
    if (!isTaskHandle(handle)) throw new Error('migrate answered without a task');
    const changes: Array<string | undefined> = [];
    handle.onChange((record) => changes.push(record.statusMessage));
    expect(await handle.outcome()).toMatchObject({ kind: 'completed' });

    const progress = ['Migrated 1 of 3', 'Migrated 2 of 3', 'Migrated 3 of 3'];
    const statusEvents = events.flatMap((event) =>
      event.type === 'status' && event.record.recordId === handle.recordId ? [event.record.statusMessage] : [],
    );
    // the first message may already be the one the task was created with; each later one is an event of its own
    expect(statusEvents.filter((message) => progress.includes(message ?? ''))).toEqual(
      expect.arrayContaining(progress.slice(1)),
    );
    expect(changes).toEqual(expect.arrayContaining(progress.slice(1)));
  });
});
