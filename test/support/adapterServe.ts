/**
 * The fixture of the framework adapters' e2e tests: a `closeout serve` whose demo tools log their runs
 * (CLOSEOUT_RUN_LOG, read with runLog.ts), and a TaskClient on it, started before the file's tests and stopped after.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll } from 'vitest';

import type { TaskClient } from '../../src/client/index.js';
import { connectHttpTaskClient } from '../../src/client/index.js';
import { type ServeProcess, startServe } from './processes.js';

/** What every adapter returns for the demo server: its tools, and the adapter's own `closeout_answer`, sorted. */
export const ADAPTER_TOOL_NAMES = [
  'approve_deploy',
  'batch_job',
  'closeout_answer',
  'echo',
  'export_report',
  'flaky_upstream',
  'render_job',
];

export interface AdapterServe {
  /** A temporary folder, removed afterwards: the server's store, the run log and the ledger (`ledger.db`) are in it. */
  dir: string;
  runLog: string;
  server: ServeProcess;
  client: TaskClient;
}

/** Registers beforeAll/afterAll; the fields are set once beforeAll ran. */
export function serveForAdapterTests(prefix: string): AdapterServe {
  const serve = {} as AdapterServe;
  beforeAll(async () => {
    serve.dir = mkdtempSync(join(tmpdir(), prefix));
    serve.runLog = join(serve.dir, 'runs.jsonl');
    serve.server = await startServe(['--store', join(serve.dir, 'server.db')], 15_000, {
      CLOSEOUT_RUN_LOG: serve.runLog,
    });
    serve.client = await connectHttpTaskClient(serve.server.url, { ledger: join(serve.dir, 'ledger.db') });
  });
  afterAll(async () => {
    await serve.client?.close();
    await serve.server?.stop();
    if (serve.dir) rmSync(serve.dir, { recursive: true, force: true });
  });
  return serve;
}
