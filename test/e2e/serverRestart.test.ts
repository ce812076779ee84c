// A `closeout serve` process SIGKILLed mid-task and restarted on the same SQLite file: every task it left unfinished
// is either re-run from the top (resumable tools, answers replayed so nothing is asked twice) or failed as
// interrupted. None stays working, none becomes unknown.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-restart-'));
const store = join(dir, 'server.db');
const live: ServeProcess[] = [];

afterAll(async () => {
  await Promise.all(live.map((p) => p.stop()));
  rmSync(dir, { recursive: true, force: true });
});

async function serve(): Promise<ServeProcess> {
  const p = await startServe(['--store', store, '--lease-ms', '2000']);
  live.push(p);
  return p;
}

async function create(url: string, name: string, args: Record<string, unknown>): Promise<string> {
  // approve_deploy asks for form input, which the request declares (docs/DESIGN.md rule 6)
  const r = await rpc(url, 'tools/call', { name, arguments: args }, { capabilities: { elicitation: {} } });
  expect(r.result?.['resultType']).toBe('task');
  return r.result!['taskId'] as string;
}

describe('server restart on the same store', () => {
  it('re-runs resumable tasks, replays answers, and fails the others as interrupted', async () => {
    const first = await serve();
    const batch = await create(first.url, 'batch_job', { items: 40, stepMs: 100 });
    const report = await create(first.url, 'export_report', { pages: 40, pageMs: 100 });
    const deploy = await create(first.url, 'approve_deploy', { env: 'prod', deployMs: 3000 });
    await waitFor('the approval request', async () => {
      const r = await rpc(first.url, 'tasks/get', { taskId: deploy });
      return r.result?.['status'] === 'input_required' ? true : undefined;
    });
    const ack = await rpc(first.url, 'tasks/update', {
      taskId: deploy,
      inputResponses: { approval: { action: 'accept', content: { approve: true, note: 'ship it' } } },
    });
    expect(ack.error).toBeUndefined();
    await waitFor('the deploy to start', async () => {
      const r = await rpc(first.url, 'tasks/get', { taskId: deploy });
      return r.result?.['statusMessage'] === 'Deploying to prod' ? true : undefined;
    });
    await waitFor('the batch to be under way', async () => {
      const r = await rpc(first.url, 'tasks/get', { taskId: batch });
      return String(r.result?.['statusMessage'] ?? '').startsWith('Processed') ? true : undefined;
    });

    await first.kill();
    const second = await serve();

    const seen = new Map<string, Set<string>>();
    const final = async (taskId: string) =>
      waitFor(
        `task ${taskId} to settle after restart`,
        async () => {
          const r = await rpc(second.url, 'tasks/get', { taskId });
          expect(r.error).toBeUndefined();
          const status = String(r.result?.['status']);
          seen.set(taskId, (seen.get(taskId) ?? new Set()).add(status));
          return ['completed', 'failed', 'cancelled'].includes(status) ? r.result! : undefined;
        },
        30_000,
        50,
      );

    const reportTask = await final(report);
    expect(reportTask).toMatchObject({ status: 'failed', error: { code: -32603 } });
    expect(String((reportTask['error'] as { message: string }).message)).toMatch(/interrupted by a server restart/);

    const batchTask = await final(batch);
    expect(batchTask).toMatchObject({
      status: 'completed',
      result: { content: [{ text: 'Processed 40 items' }], structuredContent: { processed: 40, attempt: 2 } },
    });

    // the deploy re-ran from the top; its stored approval was replayed, so it never asked again
    const deployTask = await final(deploy);
    expect(deployTask).toMatchObject({
      status: 'completed',
      result: { content: [{ text: 'Deployed to prod (ship it)' }] },
    });
    expect(seen.get(deploy)?.has('input_required')).toBe(false);
  }, 60_000);
});
