// Every command that takes a TASK_ID takes it whatever its first characters (RELIABILITY.md, "What arrived is kept"):
// Closeout's own ids are base64url, so about 1 in 4,096 begins with `-V`, which commander read as `--version` (exit 0,
// nothing done). Options before or after the id still work.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/index.js';
import { argumentsDigest } from '../../src/client/submitting/argumentsDigest.js';
import { jsonDocument, runCli } from '../support/cli.js';

const IDS = ['-Vx3kQ9_a8Zt2LmN0pQrStU', '--jsonAbCdEfGhIjKlMnOpQ'];
// nothing listens there: commands that would talk to the server say so, naming it
const ENDPOINT = 'http://127.0.0.1:9/mcp';

let dir: string;
let ledgerPath: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-cli-taskid-'));
  ledgerPath = join(dir, 'ledger.db');
  const ledger = new SqliteLedger(ledgerPath);
  try {
    for (const taskId of IDS) {
      const recordId = `record-${taskId}`;
      await ledger.recordIntent({
        recordId,
        endpoint: ENDPOINT,
        toolName: 'batch_job',
        arguments: {},
        argumentsDigest: argumentsDigest({}),
        submittedAt: Date.now(),
        leaseHolder: 'test',
        leaseExpiresAt: Date.now() + 60_000,
      });
      const at = new Date().toISOString();
      await ledger.commitTask(
        recordId,
        'test',
        {
          taskId,
          status: 'completed',
          statusMessage: undefined,
          createdAt: at,
          lastUpdatedAt: at,
          ttlMs: 60_000,
          pollIntervalMs: 1_000,
          result: { content: [{ type: 'text', text: 'done' }] },
        },
        Date.now(),
      );
    }
  } finally {
    await ledger.dispose();
  }
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each(IDS)('a taskId that begins with %s', (taskId) => {
  it('is shown by `show`, before or after its options', async () => {
    for (const args of [
      ['show', taskId, '--json', '--ledger', ledgerPath],
      ['show', '--json', '--ledger', ledgerPath, taskId],
    ]) {
      const run = await runCli(args);
      expect(run.code, run.stderr).toBe(0);
      expect(jsonDocument(run.stdout)).toMatchObject({ record: { taskId, localState: 'terminal' } });
    }
  });

  it('is taken by `cancel`, `resume`, `answer` and `resubmit`', async () => {
    const cancel = await runCli(['cancel', taskId, '--json', '--ledger', ledgerPath]);
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(jsonDocument(cancel.stdout)).toMatchObject({ taskId, alreadyClosed: true });

    const resume = await runCli(['resume', taskId, '--json', '--ledger', ledgerPath]);
    expect(resume.code, resume.stderr).toBe(0);
    expect(resume.stdout).toContain(`"taskId":${JSON.stringify(taskId)}`);

    const answer = await runCli(['answer', taskId, '--decline', '--json', '--ledger', ledgerPath]);
    expect(answer.code, answer.stderr).toBe(0);
    expect(jsonDocument(answer.stdout)).toMatchObject({ taskId, answered: [] });

    // resubmit reads the record and then needs its server: nothing listens there, and it says so
    const resubmit = await runCli(['resubmit', taskId, '--ledger', ledgerPath]);
    expect(resubmit.code).toBe(1);
    expect(resubmit.stderr).toContain(ENDPOINT);
  });
});
