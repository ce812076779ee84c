/**
 * The fixtures of the framework adapters' e2e tests: a `closeout serve` whose demo tools log their runs
 * (CLOSEOUT_RUN_LOG, read with runLog.ts), or a server of the tools the demo lacks (fixtures/outcomeServer.mjs), and a
 * TaskClient on it, started before the file's tests and stopped after.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

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

const OUTCOME_SERVER = fileURLToPath(new URL('../e2e/fixtures/outcomeServer.mjs', import.meta.url));

export interface AdapterServe {
  /** A temporary folder, removed afterwards: the server's store, the run log and the ledger (`ledger.db`) are in it. */
  dir: string;
  runLog: string;
  server: ServeProcess;
  client: TaskClient;
}

/** `closeout serve` with the demo tools. Registers beforeAll/afterAll; the fields are set once beforeAll ran. */
export function serveForAdapterTests(prefix: string): AdapterServe {
  return serveWith(
    prefix,
    (store) => ['--store', store],
    (argv) => argv,
  );
}

/** fixtures/outcomeServer.mjs (`measure`: structured content only), as serveForAdapterTests serves the demo tools. */
export function serveOutcomeTools(prefix: string): AdapterServe {
  return serveWith(
    prefix,
    () => [],
    (_argv, store) => [process.execPath, OUTCOME_SERVER, store],
  );
}

function serveWith(
  prefix: string,
  args: (store: string) => string[],
  launch: (argv: string[], store: string) => string[],
): AdapterServe {
  const serve = {} as AdapterServe;
  beforeAll(async () => {
    serve.dir = mkdtempSync(join(tmpdir(), prefix));
    serve.runLog = join(serve.dir, 'runs.jsonl');
    const store = join(serve.dir, 'server.db');
    serve.server = await startServe(args(store), 15_000, { CLOSEOUT_RUN_LOG: serve.runLog }, (argv) =>
      launch(argv, store),
    );
    serve.client = await connectHttpTaskClient(serve.server.url, { ledger: join(serve.dir, 'ledger.db') });
  });
  afterAll(async () => {
    await serve.client?.close();
    await serve.server?.stop();
    if (serve.dir) rmSync(serve.dir, { recursive: true, force: true });
  });
  return serve;
}
