// A client starts while its server is down (docs/client.md, "Starting while the server is down"): connecting opens the ledger and returns;
// `resumeAll()` takes up what the ledger holds and follows it, its polls recorded as transport failures and backed off
// until the server answers; a call made while the server is still down is refused with TaskClientError
// `unreachable`, nothing recorded or sent. What waiting cannot mend fails at connect with a code of its own.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { connectHttpTaskClient, isTaskHandle, type TaskClient, TaskClientError } from '../../src/client/index.js';
import { serveTaskServer, type ServingTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { freePort } from '../support/postgres.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-server-down-'));
const cleanup: Array<() => Promise<unknown>> = [];
const POLL = { floorMs: 10, defaultIntervalMs: 30, capMs: 200, backoffBaseMs: 50, backoffCapMs: 200 };

afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step().catch(() => undefined);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function serve(port: number, store: string, tokens?: string[]): Promise<ServingTaskServer> {
  const taskStore = new SqliteTaskStore(store);
  const tasks = new TaskServer({ store: taskStore, onError: () => {} });
  tasks.registerTool('job', { task: { support: 'required', resumable: true, pollIntervalMs: 30 } }, async () => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return { content: [{ type: 'text', text: 'done' }] };
  });
  const serving = await serveTaskServer(tasks, {
    port,
    host: '127.0.0.1',
    ...(tokens && { tokens: Object.fromEntries(tokens.map((token) => [token, 'alice'])) }),
  });
  const close = async () => {
    await serving.close();
    await taskStore.close();
  };
  cleanup.push(close);
  return { ...serving, close };
}

describe('a client whose server is down', () => {
  it('connects, refuses calls clearly, and follows what the ledger holds once the server is back', async () => {
    const port = await freePort();
    const store = join(dir, 'tasks.db');
    const ledger = join(dir, 'ledger.db');
    const first = await serve(port, store);
    const earlier = await connectHttpTaskClient(first.url, { ledger, pollPolicy: POLL });
    const handle = await earlier.callTool('job', {});
    if (!isTaskHandle(handle)) throw new Error('job answered without a task');
    await earlier.close(); // the record stays open in the ledger
    await first.close(); // and the server goes down with the task open

    const client: TaskClient = await connectHttpTaskClient(first.url, { ledger, pollPolicy: POLL });
    cleanup.push(() => client.close());
    const refused = await client.callTool('job', {}).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(TaskClientError);
    expect(refused).toMatchObject({ code: 'unreachable' });
    expect((refused as Error).message).toMatch(/cannot be reached .*connection refused.*Nothing was sent/);
    expect((await client.list()).map((record) => record.recordId)).toEqual([handle.recordId]);

    const { resumed } = await client.resumeAll();
    expect(resumed.map((h) => h.recordId)).toEqual([handle.recordId]);
    await waitFor('a poll to fail as a transport failure', async () =>
      (await client.get(handle.recordId))?.lastError?.kind === 'transport' ? true : undefined,
    );

    await serve(port, store);
    expect(await resumed[0]!.outcome()).toMatchObject({ kind: 'completed' });
    const again = await client.callTool('job', {});
    if (!isTaskHandle(again)) throw new Error('job answered without a task');
    expect(await again.outcome()).toMatchObject({ kind: 'completed' });
  });

  it('fails at connect on what waiting would not mend: a refused credential', async () => {
    const port = await freePort();
    const serving = await serve(port, join(dir, 'tokens.db'), ['secret']);
    const refused = await connectHttpTaskClient(serving.url, {
      ledger: join(dir, 'ledger-unauthorized.db'),
      requestInit: { headers: { authorization: 'Bearer wrong' } },
    }).catch((error: unknown) => error);
    expect(refused).toMatchObject({ code: 'unauthorized' });
    expect((refused as Error).message).toMatch(/refused this client's credential \(HTTP 401\)/);
  });

  it('fails at once with connectLater: false', async () => {
    const port = await freePort();
    const refused = await connectHttpTaskClient(`http://127.0.0.1:${port}/mcp`, {
      ledger: join(dir, 'ledger-now.db'),
      connectLater: false,
    }).catch((error: unknown) => error);
    expect(refused).toMatchObject({ code: 'unreachable' });
  });
});
