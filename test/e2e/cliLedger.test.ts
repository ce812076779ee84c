// The commands that work from the ledger (`ls`, `show`, `cancel`) and every kind of bad input, as real processes
// against a real `closeout serve`: bad input gets one line on stderr that says what is wrong and what to do, a
// non-zero exit code, nothing on stdout, and leaves the ledger as it was.
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { type CliRun, jsonDocument, runCli } from '../support/cli.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-ledger-'));
let ledgers = 0;
const newLedger = () => join(dir, `ledger-${++ledgers}.db`);
let server: ServeProcess;
let url: string;

beforeAll(async () => {
  server = await startServe(['--store', join(dir, 'server.db')]);
  url = server.url;
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

function expectOneLineFailure(run: CliRun, message: RegExp, code = 1): void {
  expect(run.code, run.stderr).toBe(code);
  expect(run.stdout).toBe('');
  const lines = run.stderr.trimEnd().split('\n');
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^closeout: /);
  expect(lines[0]).toMatch(message);
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

/** What the ledger holds, without the fields that move with the clock. */
async function ledgerState(ledger: string) {
  const listed = jsonDocument((await runCli(['ls', '--all', '--json'], { ledger })).stdout);
  return (listed['tasks'] as Record<string, unknown>[]).map(({ ageMs: _age, ...rest }) => rest);
}

describe.concurrent('closeout ls, show and cancel', { timeout: 60_000 }, () => {
  it('cancel sends tasks/cancel, says it is cooperative, and shows the cancelled state it observes', async () => {
    const ledger = newLedger();
    const detached = await runCli(['call', url, 'export_report', '--args', '{"pages":400,"pageMs":250}', '--detach'], {
      ledger,
    });
    const taskId = detached.stdout.trim();
    const cancel = await runCli(['cancel', taskId, '--json', '--wait-ms', '20000'], { ledger });
    expect(cancel.code).toBe(0);
    expect(jsonDocument(cancel.stdout), cancel.stdout + cancel.stderr).toMatchObject({
      taskId,
      acknowledged: true,
      closedOut: true,
      observed: { status: 'cancelled', localState: 'terminal' },
    });

    const [again, shown, shownJson] = await Promise.all([
      runCli(['cancel', taskId], { ledger }),
      runCli(['show', taskId], { ledger }),
      runCli(['show', taskId, '--json'], { ledger }),
    ]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`task ${taskId} has already closed out (cancelled): nothing to cancel`);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(`task ${taskId}`);
    expect(shown.stdout).toMatch(/cancel +requested/);
    expect(shown.stdout).toMatch(/timeline\n(.*\n)*.*working(.*\n)*.*cancelled/);
    const doc = jsonDocument(shownJson.stdout);
    expect(doc['record']).toMatchObject({ taskId, status: 'cancelled', toolName: 'export_report' });
    const history = doc['history'] as { status?: string }[];
    expect(history.map((h) => h.status)).toContain('cancelled');
  });

  it('a human cancel explains cooperative cancellation', async () => {
    const ledger = newLedger();
    const detached = await runCli(['call', url, 'batch_job', '--args', '{"items":400,"stepMs":250}', '--detach'], {
      ledger,
    });
    const cancel = await runCli(['cancel', detached.stdout.trim(), '--wait-ms', '20000'], { ledger });
    expect(cancel.code).toBe(0);
    expect(cancel.stdout).toContain('the server acknowledged it');
    expect(cancel.stdout).toContain('cancellation is cooperative');
    expect(cancel.stdout, cancel.stderr).toMatch(/observed: cancelled/);
  });

  it('ls lists open tasks (all with --all); show --refresh asks the server from a fresh process', async () => {
    const ledger = newLedger();
    const missing = await runCli(['ls'], { ledger });
    expect(missing.code).toBe(0);
    expect(missing.stdout).toBe(`no ledger at ${ledger} yet: \`closeout call\` creates it\n`);
    expect(existsSync(ledger)).toBe(false); // looking leaves nothing behind

    await runCli(['call', url, 'echo', '--arg', 'text=x'], { ledger });
    const detached = await runCli(
      ['call', url, 'batch_job', '--args', '{"items":400,"stepMs":250}', '--detach', '--correlation-id', 'inv-42'],
      { ledger },
    );
    const taskId = detached.stdout.trim();
    const [open, all] = await Promise.all([runCli(['ls'], { ledger }), runCli(['ls', '--all'], { ledger })]);
    expect(open.stdout).toMatch(/^TASK ID +TOOL +STATUS +AGE +LAST POLL +CORRELATION ID$/m);
    expect(open.stdout).toMatch(new RegExp(`^${taskId} +batch_job +working \\(detached\\) .* inv-42$`, 'm'));
    expect(open.stdout).not.toMatch(/echo/);
    expect(all.stdout).toMatch(/ echo +result /);

    const before = jsonDocument((await runCli(['show', taskId, '--json'], { ledger })).stdout)['record'] as {
      lastPollAt?: number;
    };
    const refreshed = await runCli(['show', taskId, '--refresh', '--json'], { ledger });
    expect(refreshed.code).toBe(0);
    const doc = jsonDocument(refreshed.stdout);
    expect(doc['refreshed']).toBe(true);
    const record = doc['record'] as { taskId: string; localState: string; status: string; lastPollAt: number };
    expect(record).toMatchObject({ taskId, localState: 'detached', status: 'working' });
    expect(record.lastPollAt).toBeGreaterThan(before.lastPollAt ?? 0);
    await runCli(['cancel', taskId], { ledger });
  });

  it('show --refresh with the server down shows the ledger record, saying the server could not be asked', async () => {
    const ledger = newLedger();
    const own = await startServe([]);
    const detached = await runCli(['call', own.url, 'batch_job', '--args', '{"items":400,"stepMs":250}', '--detach'], {
      ledger,
    });
    const taskId = detached.stdout.trim();
    await own.kill();
    const shown = await runCli(['show', taskId, '--refresh'], { ledger });
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(taskId);
    expect(shown.stdout).toMatch(/the server could not be asked: nothing is listening at .*connection refused/);
    const doc = jsonDocument((await runCli(['show', taskId, '--refresh', '--json'], { ledger })).stdout);
    expect(doc).toMatchObject({ refreshed: false, record: { taskId, status: 'working' } });
  });

  it('says a taskId prefix is too short, counts one record as one, and shows no {} default in help', async () => {
    const ledger = newLedger();
    const detached = await runCli(['call', url, 'batch_job', '--args', '{"items":400,"stepMs":250}', '--detach'], {
      ledger,
    });
    const taskId = detached.stdout.trim();
    const short = await runCli(['show', taskId.slice(0, 4)], { ledger });
    expect(short.code).not.toBe(0);
    expect(short.stderr).toMatch(
      new RegExp(`${taskId.slice(0, 4)} is too short a prefix of a taskId: give at least 6`),
    );
    // a short reference that matches nothing gets the same words as one that matches (as `task show` on a store does)
    expect((await runCli(['show', 'Q'], { ledger })).stderr).toBe(
      'closeout: Q is too short a prefix of a taskId: give at least 6 of its characters (`closeout ls --all` lists them)\n',
    );
    expect((await runCli(['show', taskId.slice(0, 8)], { ledger })).stdout).toContain(taskId);
    expect((await runCli(['ls', '--all'], { ledger })).stdout).toMatch(/^1 record in /m);
    expect((await runCli(['call', '--help'], { ledger })).stdout).not.toContain('(default: {})');
    await runCli(['cancel', taskId], { ledger });
  });
});

describe.concurrent('bad input', { timeout: 60_000 }, () => {
  it('gets one line saying what is wrong and what to do, a non-zero exit, and leaves the ledger as it was', async () => {
    const ledger = newLedger();
    await runCli(['call', url, 'echo', '--arg', 'text=before'], { ledger });
    const state = await ledgerState(ledger);
    const hash = sha256(ledger);
    const port = await closedPort();
    const fresh = newLedger();
    const cases: [string[], RegExp, string?][] = [
      [['call', 'not-a-url', 'echo'], /"not-a-url" is not a URL: expected e\.g\. http:\/\/127\.0\.0\.1:3000\/mcp/],
      [['call', 'ftp://example.com/mcp', 'echo'], /expected an http:\/\/ or https:\/\/ URL/],
      [
        ['call', `http://127.0.0.1:${port}/mcp`, 'echo'],
        /nothing is listening at http:\/\/127\.0\.0\.1:\d+\/mcp \(connection refused\): start the server/,
        fresh,
      ],
      [['call', url.replace(/\/mcp$/, '/nope'), 'echo'], /answered HTTP 404, not MCP: check the URL/],
      [['call', url, 'no_such_tool'], /has no tool "no_such_tool": pick one of batch_job, .*echo/],
      [['call', url, 'echo', '--args', '{text:1}'], /not valid JSON .*: quote it, e\.g\. --args/],
      [['call', url, 'echo', '--args', '[1,2]'], /expected a JSON object/],
      [['call', url, 'echo', '--arg', 'novalue'], /expected key=value/],
      [['call', url, 'echo', '--accept', '{}', '--decline'], /pass only one of --accept, --decline and --dismiss/],
      [['show', 'no-such-task'], /no task no-such-task in the ledger .*: list them with `closeout ls --all`/],
      [['cancel', 'no-such-task'], /no task no-such-task in the ledger/],
      [['resume', 'no-such-task'], /no task no-such-task in the ledger/],
      [['answer', 'no-such-task', '--decline'], /no task no-such-task in the ledger/],
      [['answer', 'no-such-task'], /stdin is not a terminal: pass --accept JSON, --decline or --dismiss/],
      [['cancel'], /missing required argument 'taskId'/],
      [['call', url, 'echo', '--bogus'], /unknown option '--bogus'/],
    ];
    const runs = await Promise.all(cases.map(([args, , own]) => runCli(args, { ledger: own ?? ledger })));
    runs.forEach((run, i) => expectOneLineFailure(run, cases[i]![1]));
    // an unreachable server leaves no ledger behind
    expect(existsSync(fresh)).toBe(false);
    expect(await ledgerState(ledger)).toEqual(state);
    expect(sha256(ledger)).toBe(hash);
  });

  it('a corrupt ledger is named as such and left untouched', async () => {
    const ledger = newLedger();
    writeFileSync(ledger, 'this is not a SQLite database, it only sits where the ledger should be\n'.repeat(64));
    const hash = sha256(ledger);
    const runs = await Promise.all([
      runCli(['call', url, 'echo', '--arg', 'text=x'], { ledger }),
      runCli(['ls'], { ledger }),
      runCli(['show', 'anything', '--ledger', ledger]),
    ]);
    for (const run of runs) {
      expectOneLineFailure(
        run,
        /the ledger .* is corrupt or not a Closeout ledger .*: move it aside, or pass --ledger/,
      );
    }
    expect(sha256(ledger)).toBe(hash);
  });

  it('a ledger locked by another process is named as such, and nothing is recorded', async () => {
    const ledger = newLedger();
    await runCli(['call', url, 'echo', '--arg', 'text=before'], { ledger });
    const state = await ledgerState(ledger);
    const holder = openDatabase(ledger);
    holder.exec('BEGIN EXCLUSIVE');
    try {
      const run = await runCli(['call', url, 'echo', '--arg', 'text=while locked'], { ledger });
      expectOneLineFailure(run, /the ledger .* is locked by another process .*: wait for it to finish/);
    } finally {
      holder.exec('ROLLBACK');
      holder.close();
    }
    expect(await ledgerState(ledger)).toEqual(state);
  });
});
