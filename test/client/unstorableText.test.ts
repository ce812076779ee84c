// The same key means the same thing on both ledgers (docs/DESIGN.md rule 14), on a SQLite file and on a real
// PostgreSQL: an idempotency key, correlation id or tool name holding NUL (PostgreSQL's text refuses it) or a lone
// surrogate (no UTF-8 form: `x\ud800` and `x\udc00` hashed to one wire key) is refused with a TaskClientError naming
// the field before anything is written to the ledger or sent; well-formed keys that differ stay two records; and a
// server's status message and error holding such text close the task out with the same record on both ledgers.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { PollPolicy, TaskClient, TaskRecord } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle, TaskClientError } from '../../src/client/index.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import type { FixtureServer } from './fixtures/tasksFixtureServer.js';
import { startTasksFixture } from './fixtures/tasksFixtureServer.js';

const FAST: Partial<PollPolicy> = { floorMs: 5, capMs: 100, defaultIntervalMs: 20, backoffBaseMs: 10 };

let postgres: StartedPostgres;
let fixture: FixtureServer;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
}, 180_000);

afterAll(async () => {
  await postgres?.stop();
});

beforeEach(async () => {
  fixture = await startTasksFixture();
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await fixture.close();
});

const LEDGERS: Record<string, () => Promise<string>> = {
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'closeout-unstorable-ledger-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    return join(dir, 'ledger.db');
  },
  postgres: async () => {
    const database = await postgres.createDatabase();
    cleanups.push(() => database.drop());
    return database.connectionString;
  },
};

async function client(ledger: string): Promise<TaskClient> {
  const connected = await connectHttpTaskClient(fixture.url, { ledger, pollPolicy: FAST });
  cleanups.push(() => connected.close());
  return connected;
}

const toolCalls = () => fixture.requests.filter((request) => request.method === 'tools/call').length;

/** The fields of a closed record that say what the server told, for the comparison of the two ledgers. */
const told = (record: TaskRecord | undefined) => ({
  localState: record?.localState,
  status: record?.status,
  statusMessage: record?.statusMessage,
  terminalReason: record?.terminalReason,
  error: record?.error,
});

/** What each ledger recorded of the odd-text task, by ledger name. */
const recorded: Record<string, unknown> = {};

for (const [ledgerName, location] of Object.entries(LEDGERS)) {
  describe(`on a ${ledgerName} ledger`, () => {
    it('refuses a key, correlation id or tool name no store keeps as sent, naming it, recording and sending nothing', async () => {
      const tasks = await client(await location());
      const refusals: [string, Promise<unknown>][] = [
        ['idempotencyKey', tasks.callTool('slow', {}, { idempotencyKey: 'release\u000042' })],
        ['idempotencyKey', tasks.callTool('slow', {}, { idempotencyKey: 'x\ud800' })],
        ['idempotencyKey', tasks.callTool('slow', {}, { idempotencyKey: 'x\udc00' })],
        ['correlationId', tasks.callTool('slow', {}, { correlationId: 'order\u00007' })],
        ['the tool name', tasks.callTool('sl\u0000ow', {})],
      ];
      for (const [field, call] of refusals) {
        const error = await call.then(
          () => undefined,
          (thrown: unknown) => thrown,
        );
        expect(error, field).toBeInstanceOf(TaskClientError);
        expect(error, field).toMatchObject({ code: 'invalid-argument' });
        expect((error as Error).message, field).toContain(`${field} must be well-formed Unicode text`);
      }
      expect(await tasks.ledger.list()).toEqual([]);
      expect(toolCalls()).toBe(0);

      // well-formed keys that differ (an astral character each) are two records; the same key is the same one
      const a = await tasks.callTool('slow', {}, { idempotencyKey: 'x\ud83d\ude00' });
      const b = await tasks.callTool('slow', {}, { idempotencyKey: 'x\ud83d\ude01' });
      const again = await tasks.callTool('slow', {}, { idempotencyKey: 'x\ud83d\ude00' });
      if (!isTaskHandle(a) || !isTaskHandle(b) || !isTaskHandle(again)) throw new Error('slow answered without a task');
      expect(b.recordId).not.toBe(a.recordId);
      expect(again.recordId).toBe(a.recordId);
      expect(toolCalls()).toBe(2);

      // a resubmission under such a key is refused alike, and writes no new record
      await a.outcome();
      const resubmitted = await tasks.resubmit(a.recordId, { idempotencyKey: 'x\u0000' }).then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      expect(resubmitted).toMatchObject({ code: 'invalid-argument' });
      expect((resubmitted as Error).message).toContain('idempotencyKey must be well-formed Unicode text');
      expect(await tasks.ledger.list()).toHaveLength(2);
      await b.outcome();
    });

    it('closes out a task whose status message and error hold NUL and lone surrogates, alike on both ledgers', async () => {
      const tasks = await client(await location());
      const handle = await tasks.callTool('odd-text', {});
      if (!isTaskHandle(handle)) throw new Error('odd-text answered without a task');
      const outcome = await handle.outcome();
      expect(outcome).toMatchObject({ kind: 'failed', error: { code: -32603, message: 'bo\u0000om \udc00' } });
      const record = await tasks.ledger.get(handle.recordId);
      expect(told(record)).toEqual({
        localState: 'terminal',
        status: 'failed',
        statusMessage: 'crash\ufffded',
        terminalReason: 'task failed: -32603 bo\ufffdom \ufffd',
        // the error is JSON text in both ledgers: kept as the server sent it
        error: { code: -32603, message: 'bo\u0000om \udc00' },
      });
      const history = await tasks.ledger.history(handle.recordId);
      expect(history.at(-1)).toMatchObject({ status: 'failed', statusMessage: 'crash\ufffded' });
      recorded[ledgerName] = { record: told(record), history: history.map((entry) => entry.statusMessage) };
    });
  });
}

describe('both ledgers', () => {
  it('recorded the odd text alike', () => {
    expect(recorded['sqlite']).toBeDefined();
    expect(recorded['postgres']).toEqual(recorded['sqlite']);
  });
});
