/** An in-process Closeout server over real HTTP on a real SQLite file in a temp dir. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type ServeOptions, serveTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import type { TaskServerOptions } from '../../src/server/taskServerOptions.js';

export interface TestServer {
  url: string;
  tasks: TaskServer;
  store: SqliteTaskStore;
  dir: string;
  close(): Promise<void>;
}

export async function startTestServer(
  register: (tasks: TaskServer) => void,
  options: { server?: Partial<TaskServerOptions>; serve?: ServeOptions; dbPath?: string } = {},
): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-test-'));
  const store = new SqliteTaskStore(options.dbPath ?? join(dir, 'tasks.db'));
  const errors: Error[] = [];
  const tasks = new TaskServer({ store, onError: (e) => errors.push(e), ...options.server });
  register(tasks);
  const serving = await serveTaskServer(tasks, { port: 0, ...options.serve });
  return {
    url: serving.url,
    tasks,
    store,
    dir,
    close: async () => {
      await serving.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
