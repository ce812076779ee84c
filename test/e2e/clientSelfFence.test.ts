// A client worker cut off from its ledger alone stops its own input rounds before another worker may ask again
// (docs/DESIGN.md, "Rules learned in the field", 13, the client's half): worker A reaches the shared PostgreSQL ledger
// through a TCP proxy of its own, which the test SIGSTOPs while A's handler waits on a person; worker B, its ledger
// healthy and its takeover gate open, takes A's record once A's lease lapses and asks. A's handler must have been
// aborted, its signal naming 'lease-unrenewed', before B's was called: a person is never asked in two places at once.
// What A's handler returns after its signal is not sent; B's answer is, once; the task completes once. A stall shorter
// than the fence's margin changes nothing. Both workers append to one input log with O_APPEND: its order is real.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { PostgresLedger } from '../../src/client/index.js';
import { type FleetEvent, FleetWorkers } from '../support/fleetWorkers.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startPrinting, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const PROXY = fileURLToPath(new URL('./fixtures/tcpProxy.mjs', import.meta.url));
const LEASE_MS = 3000;
const dir = mkdtempSync(join(tmpdir(), 'closeout-client-self-fence-'));
let logs = 0;

let postgres: StartedPostgres;
let serve: ServeProcess;
const workers = new FleetWorkers();
const proxies: ServeProcess[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
  const store = await postgres.createDatabase();
  serve = await startServe(['--store', store.connectionString]);
}, 120_000);

afterEach(() => {
  workers.killAll();
  for (const proxy of proxies.splice(0)) {
    proxy.child.kill('SIGCONT');
    proxy.child.kill('SIGKILL');
  }
});

afterAll(async () => {
  await serve?.stop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

interface InputLine {
  event: 'asked' | 'aborted';
  pid: number;
  taskId: string;
  key: string;
  previouslyAsked?: boolean;
  cause?: string;
  at: number;
  /** Its place in the log. */
  index: number;
}

function inputLines(log: string): InputLine[] {
  if (!existsSync(log)) return [];
  return readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .filter((line) => line !== '')
    .map((line, index) => ({ ...(JSON.parse(line) as Omit<InputLine, 'index'>), index }));
}

/**
 * Worker B (direct to the ledger, taking over every 300 ms) and worker A (through its own proxy) on a fresh ledger;
 * A submits one approve_deploy whose person does not answer. Resolves once A's handler was asked and B's gate is open.
 */
async function twoWorkers(events: FleetEvent[]) {
  const ledger = await postgres.createDatabase();
  const inputLog = join(dir, `inputs-${++logs}.jsonl`);
  const target = new URL(ledger.connectionString);
  const proxy = await startPrinting('the TCP proxy', [process.execPath, PROXY, target.hostname, target.port], 20_000);
  proxies.push(proxy);
  const viaProxy = new URL(ledger.connectionString);
  viaProxy.port = proxy.url;
  const base = { url: serve.url, leaseMs: LEASE_MS, inputLog, stayAlive: true };
  const b = workers.start(
    { ...base, ledger: ledger.connectionString, takeOverEveryMs: 300, calls: [], answerAfterMs: 200 },
    events,
  );
  const bStarted = Date.now();
  const a = workers.start(
    {
      ...base,
      ledger: viaProxy.toString(),
      calls: [
        {
          tool: 'approve_deploy',
          args: { env: `fenced-${logs}`, deployMs: 100 },
          idempotencyKey: `fenced-${logs}`,
          correlationId: 'fenced',
        },
      ],
      hangInputFor: ['fenced'],
    },
    events,
  );
  const asked = await waitFor(
    "A's handler to be asked",
    () => inputLines(inputLog).find((line) => line.pid === a.pid && line.event === 'asked'),
    30_000,
  );
  // B's takeover gate opens a lease after its first renewal's answer (a third of a lease after it started)
  await sleep(Math.max(0, bStarted + LEASE_MS * 2 - Date.now()));
  return { a, b, proxy, inputLog, taskId: asked.taskId, ledger };
}

describe('a client worker cut off from its PostgreSQL ledger alone', { timeout: 120_000 }, () => {
  it('aborts its input round before another worker asks again, and sends nothing from it', async () => {
    const events: FleetEvent[] = [];
    const { a, b, proxy, inputLog, taskId, ledger } = await twoWorkers(events);

    // A's statements hang in the stopped proxy: no error, no answer, as behind a dead network path
    proxy.child.kill('SIGSTOP');
    const bAsked = await waitFor(
      "B to take A's record and ask",
      () => inputLines(inputLog).find((line) => line.pid === b.pid && line.event === 'asked'),
      30_000,
      50,
    );
    // time for A's handler to show it is still open, if it is
    await sleep(500);
    const log = inputLines(inputLog);
    const aborted = log.find((line) => line.pid === a.pid && line.event === 'aborted');
    const report = JSON.stringify(log);
    // A's round stopped, told why, before B asked the person: never two prompts open at once
    expect(aborted, report).toMatchObject({ taskId, key: 'approval', cause: 'lease-unrenewed' });
    expect(aborted!.index, report).toBeLessThan(bAsked.index);
    expect(bAsked, report).toMatchObject({ taskId, key: 'approval', previouslyAsked: true });
    expect(log.filter((line) => line.event === 'asked')).toHaveLength(2);

    // B's answer completes the task; A comes back, and its late answer goes nowhere
    await waitFor(
      'B to close the task out',
      () => (events.some((e) => e.event === 'closed' && e.taskId === taskId) ? true : undefined),
      30_000,
    );
    proxy.child.kill('SIGCONT');
    await sleep(LEASE_MS);
    // A said so on the record's events, once its ledger answered again
    expect(events.some((e) => e.pid === a.pid && e.event === 'error' && /lease-unrenewed/.test(e.message ?? ''))).toBe(
      true,
    );
    const closed = events.filter((e) => e.event === 'closed' && e.taskId === taskId);
    expect(closed).toHaveLength(1);
    expect(closed[0]).toMatchObject({ pid: b.pid, status: 'completed' });
    const task = (await rpc(serve.url, 'tasks/get', { taskId })).result;
    expect(JSON.stringify(task)).toContain(`answered by ${b.pid}`);
    expect(JSON.stringify(task)).not.toContain('answered late');
    const reader = await PostgresLedger.open(ledger.connectionString);
    try {
      const [record] = await reader.list({});
      expect(record?.localState).toBe('terminal');
      expect(record?.inputs.map((input) => [input.key, input.response?.['content']])).toEqual([
        ['approval', { approve: true, note: `answered by ${b.pid}` }],
      ]);
    } finally {
      await reader.dispose();
    }
    expect(inputLines(inputLog).filter((line) => line.event === 'asked')).toHaveLength(2);
  });

  it('keeps its input round through a ledger stall shorter than the fence margin', async () => {
    const events: FleetEvent[] = [];
    const { a, proxy, inputLog, taskId } = await twoWorkers(events);

    // a fifth of a lease of margin after the renewal that lands late: a stall of a quarter of a lease stops nothing
    proxy.child.kill('SIGSTOP');
    await sleep(LEASE_MS / 4);
    proxy.child.kill('SIGCONT');
    await sleep(LEASE_MS * 2);
    const log = inputLines(inputLog);
    expect(
      log.map((line) => [line.pid === a.pid, line.event]),
      JSON.stringify(log),
    ).toEqual([[true, 'asked']]);
    expect(events.filter((e) => e.event === 'error' && /lease-unrenewed/.test(e.message ?? ''))).toEqual([]);
    const task = (await rpc(serve.url, 'tasks/get', { taskId })).result;
    expect(task?.['status']).toBe('input_required');
  });
});
