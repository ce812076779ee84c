/**
 * The ledger round trip of `closeout doctor` (docs/REQUIREMENTS.md S18: "can the client recover the same task after a
 * restart"): the doctor's task is recorded in a new ledger exactly as the client records a handle (intent, taskId
 * committed, then let go), and a fresh `closeout` process takes it up from that ledger and asks the server about it.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { SqliteLedger } from '../../client/ledger/index.js';
import { argumentsDigest } from '../../client/submitting/argumentsDigest.js';
import { parseGetTaskResult } from '../../client/transport/serverOutput.js';
import type { JsonObject } from '../../protocol/index.js';
import { TASK_STATUSES } from '../../protocol/index.js';
import { TOKEN_ENV } from '../session.js';
import type { Check, ResumeCheckContext } from './doctor.js';
import { rpc } from './wireProbe.js';

const CLI_PATH = fileURLToPath(new URL('../main.js', import.meta.url));
const NAME = 'resume';

export async function ledgerRoundTrip(url: string, taskId: string, context: ResumeCheckContext): Promise<Check> {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-doctor-'));
  try {
    const ledgerPath = join(dir, 'ledger.db');
    const got = await rpc(url, 'tasks/get', { taskId }, context.token ? { token: context.token } : {});
    if (!got.result)
      return fail(`tasks/get answered an error before the round trip: ${got.error?.message ?? 'nothing'}`);
    let task;
    try {
      task = parseGetTaskResult(got.result, taskId);
    } catch (error) {
      return fail(`the client cannot use the tasks/get answer: ${(error as Error).message}`);
    }
    const ledger = new SqliteLedger(ledgerPath);
    try {
      const holder = `closeout-doctor:${process.pid}`;
      const recordId = randomUUID();
      const now = Date.now();
      const args = context.args as JsonObject;
      await ledger.recordIntent({
        recordId,
        endpoint: url,
        toolName: context.toolName,
        arguments: args,
        argumentsDigest: argumentsDigest(args),
        submittedAt: now,
        leaseHolder: holder,
        leaseExpiresAt: now + 30_000,
      });
      await ledger.markSent(recordId, holder, now);
      await ledger.commitTask(recordId, holder, task, now);
      await ledger.detach(recordId, holder, now);
    } finally {
      await ledger.dispose();
    }
    const child = await runCli(['show', taskId, '--refresh', '--json', '--ledger', ledgerPath], context.token);
    if (child.code !== 0) {
      return fail(
        `a fresh closeout process could not take the task up: ${lastLine(child.stderr) || `exit ${child.code}`}`,
      );
    }
    let doc: { refreshed?: boolean; note?: string | null; record?: { taskId?: string; status?: string } };
    try {
      doc = JSON.parse(child.stdout) as typeof doc;
    } catch {
      return fail('a fresh closeout process printed something that is not JSON');
    }
    const status = doc.record?.status;
    if (doc.record?.taskId !== taskId)
      return fail(`the fresh process found taskId ${doc.record?.taskId}, not ${taskId}`);
    if (!doc.refreshed) return fail(`the fresh process could not query the task: ${doc.note ?? 'no answer'}`);
    if (!(TASK_STATUSES as readonly string[]).includes(status ?? '')) {
      return fail(`the fresh process got status ${JSON.stringify(status)}, not a task status`);
    }
    return {
      name: NAME,
      status: 'pass',
      detail: `a fresh closeout process took task ${taskId} up from a ledger and tasks/get answered "${status}"`,
    };
  } catch (error) {
    return fail((error as Error).message);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function fail(detail: string): Check {
  return { name: NAME, status: 'fail', detail };
}

function lastLine(text: string): string {
  return (
    text
      .trim()
      .split('\n')
      .pop()
      ?.replace(/^closeout: /, '') ?? ''
  );
}

function runCli(args: string[], token: string | undefined): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
    if (token) env[TOKEN_ENV] = token;
    const child = spawn(process.execPath, [CLI_PATH, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}
