// `closeout tasks` and `closeout task show` read what a real `closeout serve` stored, on SQLite and on PostgreSQL:
// every caller's tasks newest first with counts per status, each filter (an idempotency key whoever's it is), pages
// joined by the printed cursor into the whole listing, one task in full (arguments, inputs, steps, result or error),
// for people and as --json; bad input is one clear line and exit 1, a missing store file is not created, and a
// connection string's password is never shown.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { IDEMPOTENCY_KEY_META_KEY } from '../../src/protocol/index.js';
import { jsonDocument, runCli } from '../support/cli.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const TOKENS = ['--token', `${ALICE}=alice`, '--token', `${BOB}=bob`];

let dir: string;
let postgres: StartedPostgres;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-cli-store-tasks-'));
  postgres = await startPostgres();
});
afterAll(async () => {
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Listed {
  store: string;
  counts: Record<string, number>;
  tasks: Array<Record<string, unknown>>;
  nextCursor: string | null;
}

async function listed(store: string, ...args: string[]): Promise<Listed> {
  const run = await runCli(['tasks', '--store', store, '--json', ...args]);
  expect(run.code, run.stderr).toBe(0);
  return jsonDocument(run.stdout) as unknown as Listed;
}

async function call(
  url: string,
  token: string,
  name: string,
  args: Record<string, unknown>,
  idempotencyKey?: string,
): Promise<string> {
  const answer = await rpc(
    url,
    'tools/call',
    { name, arguments: args },
    {
      token,
      capabilities: { elicitation: {} },
      ...(idempotencyKey !== undefined && { meta: { [IDEMPOTENCY_KEY_META_KEY]: idempotencyKey } }),
    },
  );
  const taskId = answer.result?.['taskId'];
  if (typeof taskId !== 'string') throw new Error(`no task: ${JSON.stringify(answer)}`);
  return taskId;
}

async function statusOf(url: string, token: string, taskId: string): Promise<unknown> {
  return (await rpc(url, 'tasks/get', { taskId }, { token })).result?.['status'];
}

describe.each(['sqlite', 'postgres'] as const)('closeout tasks and task show on a %s store', (kind) => {
  let store: string;
  let serve: ServeProcess | undefined;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    store = kind === 'sqlite' ? join(dir, 'server.db') : (await postgres.createDatabase()).connectionString;
    serve = await startServe(['--store', store, ...TOKENS]);
    const url = serve.url;
    // one at a time, so their creation times order them
    // two callers who happen to use the same idempotency key: the key is unique per caller only
    ids['batch'] = await call(url, ALICE, 'batch_job', { items: 2, stepMs: 0 }, 'nightly-42');
    ids['flaky'] = await call(url, ALICE, 'flaky_upstream', {});
    ids['deploy'] = await call(url, ALICE, 'approve_deploy', { env: 'staging' });
    ids['report'] = await call(url, BOB, 'export_report', { pages: 1, pageMs: 0 }, 'nightly-42');
    await waitFor('the tasks to settle', async () => {
      const statuses = await Promise.all([
        statusOf(url, ALICE, ids['batch']!),
        statusOf(url, ALICE, ids['flaky']!),
        statusOf(url, ALICE, ids['deploy']!),
        statusOf(url, BOB, ids['report']!),
      ]);
      return statuses.join() === 'completed,failed,input_required,completed' ? true : undefined;
    });
  }, 90_000);

  afterAll(async () => {
    await serve?.stop();
  });

  it('lists every caller’s tasks newest first, with counts per status, for people and as JSON', async () => {
    const all = await listed(store);
    expect(all.tasks.map((task) => task['taskId'])).toEqual([ids['report'], ids['deploy'], ids['flaky'], ids['batch']]);
    expect(all.counts).toEqual({ working: 0, input_required: 1, completed: 2, failed: 1, cancelled: 0 });
    expect(all.nextCursor).toBeNull();
    expect(all.tasks[0]).toMatchObject({
      toolName: 'export_report',
      status: 'completed',
      principal: 'client:bob',
      attempt: 1,
      leaseHolder: null,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    expect(all.tasks[1]).toMatchObject({
      status: 'input_required',
      statusMessage: 'Waiting for approval to deploy to staging',
    });
    // a listing carries no arguments or results
    for (const task of all.tasks) expect(Object.keys(task)).not.toEqual(expect.arrayContaining(['arguments']));
    for (const task of all.tasks) expect(Object.keys(task)).not.toEqual(expect.arrayContaining(['result']));

    const human = await runCli(['tasks', '--store', store]);
    expect(human.code, human.stderr).toBe(0);
    const lines = human.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^TASK ID +TOOL +STATUS +PRINCIPAL +AGE +ATTEMPT +MESSAGE$/);
    expect(lines[1]).toMatch(new RegExp(`^${ids['report']} +export_report +completed +client:bob +`));
    expect(lines[2]).toMatch(
      new RegExp(`^${ids['deploy']} +approve_deploy +input_required +client:alice +.* Waiting for approval`),
    );
    expect(lines.at(-1)).toMatch(/^working 0 · input_required 1 · completed 2 · failed 1 · cancelled 0 \(4 tasks in /);
  });

  it('filters by status, tool, principal, id prefix, idempotency key and creation time', async () => {
    const idsOf = (page: Listed) => page.tasks.map((task) => task['taskId']);
    expect(idsOf(await listed(store, '--status', 'completed'))).toEqual([ids['report'], ids['batch']]);
    expect(idsOf(await listed(store, '--status', 'failed,input_required'))).toEqual([ids['deploy'], ids['flaky']]);
    expect(idsOf(await listed(store, '--status', 'failed', '--status', 'completed'))).toEqual([
      ids['report'],
      ids['flaky'],
      ids['batch'],
    ]);
    expect(idsOf(await listed(store, '--tool', 'flaky_upstream'))).toEqual([ids['flaky']]);
    const bob = await listed(store, '--principal', 'client:bob');
    expect(idsOf(bob)).toEqual([ids['report']]);
    expect(bob.counts).toEqual({ working: 0, input_required: 0, completed: 1, failed: 0, cancelled: 0 });
    expect(idsOf(await listed(store, '--prefix', ids['deploy']!.slice(0, 12)))).toEqual([ids['deploy']]);
    const keyed = await listed(store, '--idempotency-key', 'nightly-42');
    expect(idsOf(keyed)).toEqual([ids['report'], ids['batch']]);
    expect(keyed.counts).toEqual({ working: 0, input_required: 0, completed: 2, failed: 0, cancelled: 0 });
    expect(idsOf(await listed(store, '--idempotency-key', 'nightly-42', '--principal', 'client:bob'))).toEqual([
      ids['report'],
    ]);
    // the exact key, never a prefix of it
    expect(idsOf(await listed(store, '--idempotency-key', 'nightly'))).toEqual([]);
    const deployCreated = (await listed(store, '--tool', 'approve_deploy')).tasks[0]!['createdAt'] as string;
    expect(idsOf(await listed(store, '--since', deployCreated))).toEqual([ids['report'], ids['deploy']]);
    expect(idsOf(await listed(store, '--before', deployCreated))).toEqual([ids['flaky'], ids['batch']]);
    expect(idsOf(await listed(store, '--principal', 'nobody'))).toEqual([]);
  });

  it('pages with --limit, each page’s cursor leading to the next, until the listing is whole', async () => {
    const seen: unknown[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Listed = await listed(store, '--limit', '1', ...(cursor ? ['--cursor', cursor] : []));
      expect(page.tasks).toHaveLength(1);
      seen.push(page.tasks[0]!['taskId']);
      cursor = page.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);
    expect(seen).toEqual([ids['report'], ids['deploy'], ids['flaky'], ids['batch']]);
    const human = await runCli(['tasks', '--store', store, '--limit', '3']);
    expect(human.stdout).toMatch(/more: the same command with --cursor [A-Za-z0-9_-]+\n$/);
  });

  it('shows one task in full: arguments, inputs, steps and result, or the error', async () => {
    const batch = await runCli(['task', 'show', ids['batch']!, '--store', store, '--json']);
    expect(batch.code, batch.stderr).toBe(0);
    const { task } = jsonDocument(batch.stdout) as { task: Record<string, unknown> };
    expect(task).toMatchObject({
      taskId: ids['batch'],
      toolName: 'batch_job',
      status: 'completed',
      principal: 'client:alice',
      arguments: { items: 2, stepMs: 0 },
      attempt: 1,
      checkpoint: 2,
      result: { content: [{ type: 'text', text: 'Processed 2 items' }] },
      error: null,
    });

    const deploy = await runCli(['task', 'show', ids['deploy']!.slice(0, 10), '--store', store, '--json']);
    expect(deploy.code, deploy.stderr).toBe(0);
    const open = (jsonDocument(deploy.stdout) as { task: Record<string, unknown> }).task;
    expect(open).toMatchObject({
      taskId: ids['deploy'],
      status: 'input_required',
      leaseHolder: expect.any(String),
      inputs: [{ key: 'approval', request: { method: 'elicitation/create' }, response: null }],
      result: null,
    });

    const human = await runCli(['task', 'show', ids['flaky']!, '--store', store]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(`task ${ids['flaky']}`);
    expect(human.stdout).toMatch(/\n {2}tool +flaky_upstream\n/);
    expect(human.stdout).toMatch(/\n {2}status +failed\n/);
    expect(human.stdout).toMatch(/\nerror\n {2}-32603 Upstream API rate limit exceeded\n/);
    const shown = await runCli(['task', 'show', ids['deploy']!, '--store', store]);
    expect(shown.stdout).toMatch(
      /\ninputs\n {2}approval \(elicitation\/create, .*\n +│ Deploy to staging\?\n +not answered\n/,
    );
    expect(shown.stdout).toMatch(/\n {2}lease +\S+/);
  });

  it('refuses bad input in one line with exit 1', async () => {
    const unknown = await runCli(['task', 'show', 'no-such-task', '--store', store]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^closeout: no task no-such-task in /);
    // a prefix of a taskId needs 6 characters, as the ledger's commands ask, and is refused in the same words
    for (const ref of [ids['batch']!.slice(0, 1), 'Q']) {
      const short = await runCli(['task', 'show', ref, '--store', store]);
      expect(short.code).toBe(1);
      expect(short.stderr).toBe(
        `closeout: ${ref} is too short a prefix of a taskId: give at least 6 of its characters (\`closeout tasks --store ...\` lists them)\n`,
      );
    }
    const prefixed = await runCli(['task', 'show', ids['batch']!.slice(0, 8), '--store', store]);
    expect(prefixed.stdout).toContain(`task ${ids['batch']}`);
    const status = await runCli(['tasks', '--store', store, '--status', 'done']);
    expect(status.code).toBe(1);
    expect(status.stderr).toContain("argument 'done' is invalid. expected working, input_required, completed");
    const cursor = await runCli(['tasks', '--store', store, '--cursor', 'garbage!']);
    expect(cursor.code).toBe(1);
    expect(cursor.stderr).toBe(
      'closeout: bad listing: cursor is not one a listing returned (pass nextCursor as it came)\n',
    );
    const limit = await runCli(['tasks', '--store', store, '--limit', '0']);
    expect(limit.code).toBe(1);
    expect(limit.stderr).toContain('expected an integer from 1 to 1000');
    const since = await runCli(['tasks', '--store', store, '--since', 'yesterday-ish']);
    expect(since.code).toBe(1);
    expect(since.stderr).toContain('expected an ISO 8601 time or ms since the epoch');
  });

  it.runIf(kind === 'postgres')('never shows the connection string’s password', async () => {
    const password = new URL(store).password;
    expect(password.length).toBeGreaterThan(0);
    const runs = await Promise.all([
      runCli(['tasks', '--store', store]),
      runCli(['tasks', '--store', store, '--json']),
      runCli(['task', 'show', 'no-such-task', '--store', store]),
    ]);
    for (const run of runs) {
      expect(run.stdout + run.stderr).toContain('(password hidden)');
      expect(run.stdout + run.stderr).not.toContain(password);
    }
  });
});

describe('closeout tasks on a store file that does not exist', () => {
  it('says so, and creates nothing', async () => {
    const missing = join(dir, 'missing', 'typo.db');
    const run = await runCli(['tasks', '--store', missing]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`closeout: no store at ${missing}: pass --store`);
    expect(existsSync(missing)).toBe(false);
  });
});
