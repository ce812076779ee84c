// `closeout` commands on a PostgreSQL ledger: `--ledger postgres://…` and CLOSEOUT_LEDGER pick it the same
// way, a task called by one command is listed and shown by others from the database, and the connection string's
// password is never printed, on success or on failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { jsonDocument, jsonLines, runCli } from '../support/cli.js';
import { fakeClock } from '../support/faketime.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-pg-ledger-'));
let postgres: StartedPostgres;
let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
let server: ServeProcess;
let password: string;

beforeAll(async () => {
  postgres = await startPostgres();
  database = await postgres.createDatabase();
  password = new URL(database.connectionString).password;
  server = await startServe(['--store', join(dir, 'server.db')]);
}, 120_000);

afterAll(async () => {
  await server?.stop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('closeout on a PostgreSQL ledger', { timeout: 90_000 }, () => {
  it('calls through CLOSEOUT_LEDGER and lists through --ledger, never printing the password', async () => {
    const call = await runCli(['call', server.url, 'batch_job', '--args', '{"items":2,"stepMs":100}', '--json'], {
      ledger: database.connectionString,
    });
    expect(call.stderr).toBe('');
    expect(call.code).toBe(0);
    const closeout = jsonLines(call.stdout).at(-1);
    expect(closeout).toMatchObject({ event: 'closeout', outcome: 'completed' });

    const ls = await runCli(['ls', '--all', '--json', '--ledger', database.connectionString], {
      env: { CLOSEOUT_LEDGER: undefined },
    });
    expect(ls.code).toBe(0);
    const listed = jsonDocument(ls.stdout);
    expect(listed['tasks']).toHaveLength(1);
    expect(String(listed['ledger'])).toContain('***');
    const text = await runCli(['ls', '--all', '--ledger', database.connectionString]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/1 record in postgres:\/\/postgres:\*\*\*@127\.0\.0\.1/);
    const unknown = await runCli(['show', 'no-such-task', '--ledger', database.connectionString]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/no task no-such-task in the ledger postgres:\/\/postgres:\*\*\*@/);
    for (const run of [call, ls, text, unknown]) expect(run.stdout + run.stderr).not.toContain(password);

    // the record is in the database, where every worker of a fleet reads it
    const admin = new pg.Client({ connectionString: database.connectionString });
    await admin.connect();
    try {
      const { rows } = await admin.query(`SELECT local_state FROM closeout_ledger_submissions`);
      expect(rows).toEqual([{ local_state: 'terminal' }]);
    } finally {
      await admin.end();
    }
  });

  it('tells a record’s age on the database’s clock, on a host whose clock is two hours ahead', async () => {
    // invariant: a PostgreSQL ledger's times are on the database's clock (Ledger.now); a command on a host
    // whose wall clock is off shows the ages every worker of the fleet sees
    const call = await runCli(['call', server.url, 'batch_job', '--args', '{"items":1,"stepMs":10}', '--json'], {
      ledger: database.connectionString,
      env: fakeClock('+2h').env,
    });
    expect(call.code).toBe(0);
    const startedAt = Date.now();
    const ls = await runCli(['ls', '--all', '--json'], {
      ledger: database.connectionString,
      env: fakeClock('+2h').env,
    });
    expect(ls.code).toBe(0);
    const tasks = jsonDocument(ls.stdout)['tasks'] as { taskId: string; ageMs: number; submittedAt: string }[];
    const listed = tasks.find(
      (task) => task.taskId === jsonLines(call.stdout).find((line) => typeof line['taskId'] === 'string')?.['taskId'],
    );
    expect(listed, ls.stdout).toBeDefined();
    // the call and the listing took less than a minute: its age, and its submission time by this test's (right) clock
    expect(listed!.ageMs).toBeGreaterThanOrEqual(0);
    expect(listed!.ageMs).toBeLessThan(60_000 + (Date.now() - startedAt));
    expect(Math.abs(Date.parse(listed!.submittedAt) - Date.now())).toBeLessThan(60_000);
  });

  it('says which ledger could not be opened, without its password', async () => {
    const wrong = new URL(database.connectionString);
    wrong.password = 'Not-The-Password-4711';
    const run = await runCli(['ls', '--ledger', wrong.href]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/cannot open the ledger postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/closeout_\w+ \(/);
    expect(run.stderr).toMatch(/password authentication failed/);
    expect(run.stdout + run.stderr).not.toContain('Not-The-Password-4711');
  });
});
