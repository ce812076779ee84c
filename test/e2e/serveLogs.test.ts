// Invariant (RELIABILITY.md, "What they found" 5): no log line of `closeout serve` prints a principal's arguments or
// results. Two principals use a real server process on SQLite and on PostgreSQL while it logs what goes wrong — a tool
// that fails, invalid and malformed requests, another principal poking at the tasks, the store's table gone for a
// moment (every store call fails and is reported), the database dropping its connections, a SIGKILL and a restart — and
// its stderr is searched for every argument, input answer and result the tasks carried, and for the database's
// password.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const ALICE = 'alice-token';
const MALLORY = 'mallory-token';
const TOKENS = ['--token', `${ALICE}=alice`, '--token', `${MALLORY}=mallory`];

/** Everything the tasks carry that a log must never show: arguments, input answers, results. */
const SECRET = {
  echo: 'echo-text-5d1f0c',
  env: 'deploy-env-9a7c31',
  note: 'approval-note-44e0b2',
  label: 'batch-label-c3b8f1',
  invalid: 'invalid-arg-7f2e90',
  malformed: 'malformed-body-1b6d4a',
  mallory: 'mallory-answer-e85c17',
  storeDown: 'store-down-env-0c93d7',
};

/** Runs one statement on the server's store from outside, as an operator would. */
async function alterStore(kind: 'sqlite' | 'postgres', store: string, sql: string): Promise<void> {
  if (kind === 'sqlite') {
    const db = openDatabase(store);
    try {
      db.exec(sql);
    } finally {
      db.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: store });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

let dir: string;
let postgres: StartedPostgres;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-serve-logs-'));
  postgres = await startPostgres();
}, 120_000);

afterAll(async () => {
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const terminal = (status: unknown) => status === 'completed' || status === 'failed' || status === 'cancelled';

async function settled(url: string, taskId: string): Promise<Record<string, unknown>> {
  return waitFor(
    `task ${taskId} to end`,
    async () => {
      const answer = await rpc(url, 'tasks/get', { taskId }, { token: ALICE });
      return terminal(answer.result?.['status']) ? answer.result : undefined;
    },
    20_000,
    50,
  );
}

async function createTask(url: string, name: string, args: Record<string, unknown>): Promise<string> {
  const answer = await rpc(
    url,
    'tools/call',
    { name, arguments: args },
    { token: ALICE, capabilities: { elicitation: {} } },
  );
  const taskId = answer.result?.['taskId'];
  if (typeof taskId !== 'string') throw new Error(`${name} created no task: ${JSON.stringify(answer)}`);
  return taskId;
}

describe.each(['sqlite', 'postgres'] as const)('closeout serve on %s', (kind) => {
  it('logs what goes wrong without any principal’s arguments or results', async () => {
    const store = kind === 'sqlite' ? join(dir, 'server.db') : (await postgres.createDatabase()).connectionString;
    const args = ['--store', store, '--lease-ms', '1000', ...TOKENS];
    const servers: ServeProcess[] = [await startServe(args)];
    try {
      let url = servers[0]!.url;

      // an inline result and a task result that carry the secrets
      const echo = await rpc(url, 'tools/call', { name: 'echo', arguments: { text: SECRET.echo } }, { token: ALICE });
      expect(JSON.stringify(echo.result)).toContain(SECRET.echo);
      const deploy = await createTask(url, 'approve_deploy', { env: SECRET.env, deployMs: 0 });
      await waitFor('the approval request', async () => {
        const answer = await rpc(url, 'tasks/get', { taskId: deploy }, { token: ALICE });
        return answer.result?.['status'] === 'input_required' ? true : undefined;
      });

      // another principal pokes at alice's task, answering it with its own words
      for (const [method, params] of [
        ['tasks/get', { taskId: deploy }],
        ['tasks/cancel', { taskId: deploy }],
        [
          'tasks/update',
          { taskId: deploy, inputResponses: { approval: { action: 'accept', content: { note: SECRET.mallory } } } },
        ],
      ] as const) {
        expect((await rpc(url, method, params, { token: MALLORY })).error?.code).toBe(-32602);
      }
      await rpc(
        url,
        'tasks/update',
        {
          taskId: deploy,
          inputResponses: { approval: { action: 'accept', content: { approve: true, note: SECRET.note } } },
        },
        { token: ALICE },
      );
      const deployed = await settled(url, deploy);
      expect(JSON.stringify(deployed)).toContain(SECRET.note);

      // a tool that fails, arguments that are invalid, a body that is not JSON, a header that does not match
      const failing = await createTask(url, 'flaky_upstream', { label: SECRET.label });
      expect((await settled(url, failing))['status']).toBe('failed');
      const invalid = await rpc(
        url,
        'tools/call',
        { name: 'approve_deploy', arguments: { env: SECRET.invalid.repeat(20) } },
        { token: ALICE },
      );
      expect(invalid.error?.code).toBe(-32602);
      const malformed = await rpc(
        url,
        'tools/call',
        {},
        {
          token: ALICE,
          rawBody: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text": ${SECRET.malformed}}}}`,
        },
      );
      expect(malformed.httpStatus).toBe(400);
      const mismatched = await rpc(
        url,
        'tools/call',
        { name: 'echo', arguments: { text: SECRET.echo } },
        {
          token: ALICE,
          headers: { 'mcp-name': 'not-echo' },
        },
      );
      expect(mismatched.httpStatus).toBe(400);

      // work in flight while every store call fails (the table is gone for a moment), while the database drops every
      // connection, and when the process dies
      const batch = await createTask(url, 'batch_job', { items: 30, stepMs: 50 });
      const table = kind === 'sqlite' ? 'tasks' : 'closeout_tasks';
      await alterStore(kind, store, `ALTER TABLE ${table} RENAME TO ${table}_away`);
      const refused = await rpc(
        url,
        'tools/call',
        { name: 'approve_deploy', arguments: { env: SECRET.storeDown } },
        { token: ALICE },
      );
      expect(refused.error?.message).toMatch(/Task store unavailable/);
      expect((await rpc(url, 'tasks/get', { taskId: deploy }, { token: ALICE })).error?.code).toBe(-32603);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await alterStore(kind, store, `ALTER TABLE ${table}_away RENAME TO ${table}`);
      if (kind === 'postgres') {
        await alterStore(
          kind,
          store,
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
      await servers[0]!.kill();
      servers.push(await startServe(args));
      url = servers[1]!.url;
      expect((await settled(url, batch))['status']).toBe('completed');

      const stderr = servers.map((server) => server.stderr()).join('\n');
      // both logging paths ran: the runtime's reports of store failures, and the HTTP layer's refusals
      expect(stderr).toMatch(/^\[closeout\] .*(no such table|does not exist)/m);
      expect(stderr).toMatch(/^\[closeout serve\] Rejected inbound request/m);
      // nor the database's password (the start line names the store)
      if (kind === 'postgres') expect(stderr).not.toContain(new URL(store).password);
      for (const [what, secret] of Object.entries(SECRET)) {
        expect(stderr.includes(secret), `${what} in the log:\n${stderr}`).toBe(false);
      }
    } finally {
      await Promise.all(servers.map((server) => server.stop()));
    }
  }, 60_000);
});
