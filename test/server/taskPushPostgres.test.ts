// Push across PostgreSQL instances (the server half): a change made on instance A reaches a
// `subscriptions/listen` stream on instance B (NOTIFY in the write's own statement, then a read of the row), with the
// body tasks/get answers on B; and when B's connections to the database are cut while the change is made (its NOTIFY
// is lost for good), B's periodic check of the subscribed ids still delivers it.
import { createServer, type Server, type Socket } from 'node:net';
import { connect } from 'node:net';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serveTaskServer, type ServingTaskServer } from '../../src/server/http.js';
import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import type { TaskServerOptions } from '../../src/server/taskServerOptions.js';
import { listen, taskNotification, withoutMeta } from '../support/listen.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

interface Instance {
  tasks: TaskServer;
  store: PostgresTaskStore;
  serving: ServingTaskServer;
  close(): Promise<void>;
}

/** Releases the `gated` task with this id (on whichever instance runs it). */
const gates = new Map<string, () => void>();

async function instance(connectionString: string, options: Partial<TaskServerOptions> = {}): Promise<Instance> {
  const store = await PostgresTaskStore.open(connectionString, { onError: () => {} });
  const tasks = new TaskServer({ store, onError: () => {}, ...options });
  const task = { support: 'required', pollIntervalMs: 1000 } as const;
  tasks.registerTool('asks', { task }, async (_args, ctx) => {
    const answer = await ctx.input('name', {
      method: 'elicitation/create',
      params: { mode: 'form', message: 'Your name?', requestedSchema: { type: 'object', properties: {} } },
    });
    return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
  });
  tasks.registerTool('gated', { task }, async (_args, ctx) => {
    await new Promise<void>((resolve) => gates.set(ctx.taskId!, resolve));
    return { content: [{ type: 'text', text: 'released' }] };
  });
  const serving = await serveTaskServer(tasks, { port: 0 });
  return {
    tasks,
    store,
    serving,
    close: async () => {
      await serving.close();
      await store.close();
    },
  };
}

/** A TCP proxy in front of PostgreSQL whose connections can be cut, and new ones refused, as a network fault. */
class CuttableProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private refusing = false;

  constructor(private readonly target: number) {
    this.server = createServer((client) => {
      if (this.refusing) return void client.destroy();
      const upstream = connect(this.target, '127.0.0.1');
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => {
          this.sockets.delete(socket);
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
  }

  async start(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return (this.server.address() as { port: number }).port;
  }

  /** Resets every open connection and refuses new ones until `restore()`. */
  cut(): void {
    this.refusing = true;
    for (const socket of this.sockets) socket.resetAndDestroy();
  }

  restore(): void {
    this.refusing = false;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const declared = { capabilities: { elicitation: {} } };

async function getTask(url: string, taskId: string): Promise<Record<string, unknown>> {
  const answer = await rpc(url, 'tasks/get', { taskId });
  const { resultType: _resultType, _meta: _meta, ...task } = answer.result ?? {};
  return task;
}

describe('push across two instances on one PostgreSQL', () => {
  let postgres: StartedPostgres;
  let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;

  beforeAll(async () => {
    postgres = await startPostgres();
    database = await postgres.createDatabase();
  }, 120_000);

  afterAll(async () => {
    await database?.drop();
    await postgres?.stop();
  });

  it('a change written on A reaches the stream on B at once, its body what tasks/get answers on B', async () => {
    // B's periodic check is a minute away: only the NOTIFY can bring the changes within the test's deadlines
    const a = await instance(database.connectionString);
    const b = await instance(database.connectionString, { push: { checkIntervalMs: 60_000 } });
    try {
      const created = await rpc(a.serving.url, 'tools/call', { name: 'asks', arguments: {} }, declared);
      const taskId = created.result?.['taskId'] as string;
      const stream = await listen(b.serving.url, [taskId], { id: 'on-b' });
      const asked = await stream.next(taskNotification(taskId, 'input_required'));
      expect(withoutMeta(asked.params)).toEqual(await getTask(b.serving.url, taskId));
      expect(a.tasks.runningCount()).toBe(1);
      expect(b.tasks.runningCount()).toBe(0);

      const from = stream.messages.length;
      await rpc(a.serving.url, 'tasks/update', {
        taskId,
        inputResponses: { name: { action: 'accept', content: {} } },
      });
      const completed = await stream.next(taskNotification(taskId, 'completed'), from, 5000);
      expect(completed.params?._meta).toEqual({ 'io.modelcontextprotocol/subscriptionId': 'on-b' });
      expect(withoutMeta(completed.params)).toEqual(await getTask(b.serving.url, taskId));
      expect(withoutMeta(completed.params)).toEqual(await getTask(a.serving.url, taskId));
      stream.abort();
    } finally {
      await a.close();
      await b.close();
    }
  }, 60_000);

  it("a change whose NOTIFY B lost (its connections cut meanwhile) reaches B's stream by the periodic check", async () => {
    const proxy = new CuttableProxy(Number(new URL(database.connectionString).port));
    const proxied = new URL(database.connectionString);
    proxied.port = String(await proxy.start());
    const a = await instance(database.connectionString);
    const b = await instance(proxied.toString(), { push: { checkIntervalMs: 300 } });
    try {
      const created = await rpc(a.serving.url, 'tools/call', { name: 'gated', arguments: {} }, declared);
      const taskId = created.result?.['taskId'] as string;
      const stream = await listen(b.serving.url, [taskId]);
      await stream.next(taskNotification(taskId, 'working'));
      const release = await waitFor('the gated handler to run on A', () => gates.get(taskId));

      // B loses the database: its LISTEN connection is reset and cannot come back while the task completes on A
      proxy.cut();
      release();
      await waitFor('the task to complete on A', async () =>
        (await getTask(a.serving.url, taskId))['status'] === 'completed' ? true : undefined,
      );
      proxy.restore();
      const completed = await stream.next(taskNotification(taskId, 'completed'), 0, 15_000);
      expect(withoutMeta(completed.params)).toEqual(await getTask(b.serving.url, taskId));
      stream.abort();
    } finally {
      await a.close();
      await b.close();
      await proxy.close();
    }
  }, 60_000);
});
