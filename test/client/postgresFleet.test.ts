// Invariants (docs/postgres.md, "A fleet of client workers on PostgreSQL"): workers of a fleet sharing one PostgreSQL
// ledger close out every task once. A postgres:// string picks the PostgresLedger; an idempotency key used by two
// workers at the same moment yields one tools/call; resumeAll() on every worker together follows each open record in
// one worker; each inputRequests key reaches one handler once in the whole fleet.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { PollPolicy, TaskClient, TaskHandle, TaskInputHandlers } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle, PostgresLedger, SqliteLedger } from '../../src/client/index.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import type { FixtureServer } from './fixtures/tasksFixtureServer.js';
import { startTasksFixture } from './fixtures/tasksFixtureServer.js';

const FAST: Partial<PollPolicy> = { floorMs: 5, capMs: 100, defaultIntervalMs: 20, backoffBaseMs: 10 };

let postgres: StartedPostgres;
let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
let fixture: FixtureServer;
const clients: TaskClient[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
});

afterAll(async () => {
  await postgres?.stop();
});

beforeEach(async () => {
  database = await postgres.createDatabase();
  fixture = await startTasksFixture();
});

afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
  await fixture.close();
  await database.drop();
});

/** A worker of the fleet: its own TaskClient and its own ledger object, on the one database. */
async function worker(inputHandlers?: TaskInputHandlers): Promise<TaskClient> {
  const client = await connectHttpTaskClient(fixture.url, {
    ledger: database.connectionString,
    pollPolicy: FAST,
    ...(inputHandlers ? { inputHandlers } : {}),
  });
  clients.push(client);
  return client;
}

const toolCalls = (tool: string) =>
  fixture.requests.filter((request) => request.method === 'tools/call' && request.params['name'] === tool).length;

describe('a fleet of workers on one PostgreSQL ledger', () => {
  it('opens a PostgresLedger for a postgres:// string and closes a task out on it', async () => {
    const client = await worker();
    expect(client.ledger).toBeInstanceOf(PostgresLedger);
    expect(client.ledger).not.toBeInstanceOf(SqliteLedger);
    const handle = await client.callTool('slow', { n: 1 });
    if (!isTaskHandle(handle)) throw new Error('slow answered without a task');
    const outcome = await handle.outcome();
    expect(outcome.record.localState).toBe('terminal');
    // another worker reads the same record from the database
    const other = await worker();
    expect(await other.ledger.get(handle.recordId)).toMatchObject({ localState: 'terminal', status: 'completed' });
  });

  it('sends one tools/call when two workers use one idempotency key at the same moment', async () => {
    const [a, b] = await Promise.all([worker(), worker()]);
    for (let round = 0; round < 5; round++) {
      const key = `order-${round}`;
      const settled = await Promise.allSettled([
        a.callTool('slow', { round }, { idempotencyKey: key }),
        b.callTool('slow', { round }, { idempotencyKey: key }),
      ]);
      // the loser either shares the winner's record or is told another worker is submitting or following it; never
      // a second send
      for (const result of settled) {
        if (result.status === 'rejected')
          expect(String(result.reason)).toMatch(/being submitted by|is followed by|leased|another/);
      }
      expect(settled.some((result) => result.status === 'fulfilled')).toBe(true);
      expect(await a.ledger.list({ idempotencyKey: key })).toHaveLength(1);
    }
    expect(toolCalls('slow')).toBe(5);
  });

  it('splits open records between workers resuming together, each followed by one, each asked once', async () => {
    const asked: string[] = [];
    const handlers = (name: string): TaskInputHandlers => ({
      elicitation: (_request, context) => {
        asked.push(`${context.recordId}:${context.key}`);
        return { action: 'accept', content: { value: name } };
      },
      roots: (_request, context) => {
        asked.push(`${context.recordId}:${context.key}`);
        return { roots: [] };
      },
    });
    // one worker submits and lets go of the handles; the records stay open for the fleet
    const submitter = await worker(handlers('submitter'));
    const recordIds: string[] = [];
    for (let i = 0; i < 6; i++) {
      const handle = (await submitter.callTool('ask', { i })) as TaskHandle;
      recordIds.push(handle.recordId);
      await handle.detach();
    }
    await submitter.close();
    const fleet = await Promise.all([worker(handlers('w1')), worker(handlers('w2')), worker(handlers('w3'))]);
    const reports = await Promise.all(fleet.map((client) => client.resumeAll()));
    const followed = reports.flatMap((report) => report.resumed.map((handle) => handle.recordId));
    // each open record is followed by exactly one worker
    expect([...followed].sort()).toEqual([...recordIds].sort());
    const outcomes = await Promise.all(reports.flatMap((report) => report.resumed.map((handle) => handle.outcome())));
    for (const outcome of outcomes) expect(outcome.record.status).toBe('completed');
    // three keys per task (name, confirm, roots), each handed to one handler once in the fleet
    expect(asked).toHaveLength(recordIds.length * 3);
    expect(new Set(asked).size).toBe(asked.length);
  });
});
