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
import { rpc } from './rpc.js';
import { waitFor } from './waitFor.js';

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

/** A server of fixtures/outcomeServer.mjs, and what its tests do to its tasks from outside the adapter under test. */
export interface OutcomeServe extends AdapterServe {
  /** Once a tool call's task is in `client`'s ledger under `key`, cancels it as another client: a `tasks/cancel`. */
  cancelFromAnotherClient(key: string): Promise<string>;
  /**
   * A task of `tool` (with no arguments) that an earlier agent process started for a tool call, under the call's
   * idempotency key `key`, on the ledger at `ledger`, and that the server has forgotten since: past its TTL and its
   * retention, `tasks/get` answers -32602. The same tool call replayed on that ledger meets it expired. Its task id.
   */
  forgottenTask(ledger: string, tool: string, key: string): Promise<string>;
}

/**
 * fixtures/outcomeServer.mjs (`measure`: structured content only; `wait`: until cancelled; `outlive_ttl`: expires), as
 * serveForAdapterTests serves the demo tools.
 */
export function serveOutcomeTools(prefix: string): OutcomeServe {
  const serve = serveWith(
    prefix,
    () => [],
    (_argv, store) => [process.execPath, OUTCOME_SERVER, store],
  ) as OutcomeServe;
  serve.cancelFromAnotherClient = (key) => cancelFromAnotherClient(serve, key);
  serve.forgottenTask = (ledger, tool, key) => forgottenTask(serve, ledger, tool, key);
  return serve;
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

async function cancelFromAnotherClient(serve: AdapterServe, key: string): Promise<string> {
  const taskId = await waitFor(
    'the call to have its task',
    async () => (await serve.client.get(key))?.taskId,
    30_000,
    50,
  );
  const answer = await rpc(serve.server.url, 'tasks/cancel', { taskId });
  if (answer.error !== undefined) throw new Error(`tasks/cancel ${taskId}: ${JSON.stringify(answer.error)}`);
  return taskId;
}

async function forgottenTask(serve: AdapterServe, ledger: string, tool: string, key: string): Promise<string> {
  const earlier = await connectHttpTaskClient(serve.server.url, { ledger });
  let taskId: string;
  try {
    const handle = await earlier.callTool(tool, {}, { idempotencyKey: key, correlationId: key });
    taskId = (handle as { taskId: string }).taskId;
  } finally {
    await earlier.close();
  }
  await waitFor(
    `task ${taskId} to be forgotten`,
    async () => ((await rpc(serve.server.url, 'tasks/get', { taskId })).error?.code === -32602 ? true : undefined),
    30_000,
    100,
  );
  return taskId;
}
