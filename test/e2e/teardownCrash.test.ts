// A close-out a process has seen is in its ledger whatever happens to the process afterwards (docs/DESIGN.md, rule
// 10): a client process on a SQLite ledger that dies hard (SIGABRT, as the SQLite driver's native assertion aborted
// one on Node 24, or SIGKILL) the moment it is told its task completed, or anywhere in its teardown before the ledger
// is closed, leaves the record closed out as completed with the result it was told, for a fresh `closeout show` to
// read with the server stopped; the task still working at the crash is in the ledger too, with its taskId.
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { jsonDocument, runCli } from '../support/cli.js';
import { type ClientWorker, startClientWorker, type WorkerEvent } from '../support/clientWorker.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const BUILT_CLIENT = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));
const FIXTURE = fileURLToPath(new URL('./fixtures/teardownCrash.mjs', import.meta.url));

/** What batch_job (src/demo/demoTools.ts) answers for the short call, run once, as outcome() gives it. */
const SHORT = { items: 2, stepMs: 150 };
const SHORT_RESULT = {
  content: [{ type: 'text', text: 'Processed 2 items' }],
  structuredContent: { processed: 2, attempt: 1 },
};
/** The same result as a record holds it: as the server sent it (src/client/taskHandle.ts, outcomeOf). */
const SHORT_RECORDED = { resultType: 'complete', ...SHORT_RESULT };

let dir: string;
let server: ServeProcess;
let worker: ClientWorker | undefined;

beforeAll(() => {
  if (!existsSync(BUILT_CLIENT)) throw new Error('dist/client is missing: run `npm run build` (npm test does it)');
});

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-teardown-crash-'));
  server = await startServe(['--store', join(dir, 'server.db'), '--lease-ms', '2000']);
});

afterEach(async () => {
  worker?.child.kill('SIGKILL');
  worker = undefined;
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** `closeout show REF --json` from a fresh process: one ledger record as the CLI reads it. */
async function shown(ledger: string, ref: string): Promise<Record<string, unknown>> {
  const run = await runCli(['show', ref, '--json'], { ledger });
  expect(run.code, run.stderr).toBe(0);
  const doc = jsonDocument(run.stdout);
  expect(doc['refreshed']).toBe(false);
  return doc['record'] as Record<string, unknown>;
}

const seen = (events: WorkerEvent[]) => events.filter((event) => event.event === 'seen');

describe('a client process that dies hard once it has seen a close-out', { timeout: 60_000 }, () => {
  it.each([
    // the earliest the application can know: the handle's listener, the client's event, the awaited outcome
    { dieAt: 'onChange', how: 'abort', signal: 'SIGABRT' },
    { dieAt: 'onEvent', how: 'abort', signal: 'SIGABRT' },
    { dieAt: 'outcome', how: 'abort', signal: 'SIGABRT' },
    { dieAt: 'outcome', how: 'SIGKILL', signal: 'SIGKILL' },
    // its teardown: close() under way, close() handing the working task's lease back, the ledger about to close
    { dieAt: 'closing', how: 'abort', signal: 'SIGABRT' },
    { dieAt: 'release', how: 'abort', signal: 'SIGABRT' },
    { dieAt: 'dispose', how: 'abort', signal: 'SIGABRT' },
  ] as const)('loses nothing when it dies at $dieAt ($signal)', async ({ dieAt, how, signal }) => {
    const ledger = join(dir, 'ledger.db');
    worker = startClientWorker(
      { url: server.url, ledger, dieAt, how, short: SHORT, long: { items: 200, stepMs: 500 } },
      {},
      // a core file, where the machine writes them, goes with the temporary directory
      { fixture: FIXTURE, cwd: dir },
    );
    // every line it wrote is read once its pipes close (the exit may come first)
    const closed = once(worker.child, 'close');
    const exited = await worker.exited;
    await closed;
    const { events } = worker;
    expect(exited, `${JSON.stringify(events)} ${worker.stderr()}`).toEqual({ code: null, signal });
    expect(events.at(-1)).toEqual({ event: 'dying', point: dieAt });
    const [shortHandle, longHandle] = events.filter((event) => event.event === 'handle');
    expect(shortHandle?.['taskId']).toEqual(expect.any(String));
    expect(longHandle?.['taskId']).toEqual(expect.any(String));
    // the process was told the close-out, with the result, before it died
    expect(seen(events).length).toBeGreaterThan(0);
    for (const told of seen(events)) {
      const result = told['via'] === 'outcome' ? SHORT_RESULT : SHORT_RECORDED;
      expect(told).toEqual({ event: 'seen', via: told['via'], status: 'completed', result });
    }
    // and never closed its ledger: SQLite deletes the write-ahead log when the last connection closes in order
    expect(existsSync(`${ledger}-wal`)).toBe(true);

    // the answer comes from the ledger alone: nothing is listening any more
    await server.stop();
    const closedOut = await shown(ledger, shortHandle!['taskId'] as string);
    expect(closedOut).toMatchObject({
      recordId: shortHandle!['recordId'],
      taskId: shortHandle!['taskId'],
      toolName: 'batch_job',
      arguments: SHORT,
      localState: 'terminal',
      status: 'completed',
      terminalReason: expect.stringMatching(/^task completed/),
      terminalAt: expect.any(Number),
    });
    expect(closedOut['result']).toEqual(SHORT_RECORDED);
    expect(closedOut['error']).toBeUndefined();

    // the task still working at the crash is not lost either: open, with the taskId the server gave it
    const open = await shown(ledger, longHandle!['taskId'] as string);
    expect(open).toMatchObject({
      recordId: longHandle!['recordId'],
      taskId: longHandle!['taskId'],
      localState: 'tracking',
      status: 'working',
    });
    expect(open['result']).toBeUndefined();
  });
});
