// Two `closeout serve` processes on one PostgreSQL database behind a round-robin proxy: any instance answers any
// task, input and cancel reach a handler on the other instance within a second, and when one instance is SIGKILLed
// mid-task the other closes out its tasks (resumable ones re-run and completed, the others failed as interrupted):
// no task lost, none run twice by two live instances.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { connectHttpTaskClient } from '../../src/client/connect.js';
import type { TaskClient } from '../../src/client/taskClient.js';
import { isTaskHandle } from '../../src/client/taskClient.js';
import type { TaskHandle } from '../../src/client/taskHandle.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { RoundRobinProxy } from '../support/roundRobinProxy.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

let postgres: StartedPostgres;
let database: { connectionString: string; drop: () => Promise<void> };
let instances: ServeProcess[] = [];
let proxy: RoundRobinProxy;
let proxyUrl: string;
let client: TaskClient;
const dir = mkdtempSync(join(tmpdir(), 'closeout-multi-'));

beforeAll(async () => {
  postgres = await startPostgres();
  database = await postgres.createDatabase();
  // started one after the other: the second also runs the migrations, which must be safe to repeat
  instances = [];
  for (let i = 0; i < 2; i++) {
    instances.push(await startServe(['--store', database.connectionString, '--lease-ms', '1500']));
  }
  proxy = new RoundRobinProxy(instances.map((p) => p.url));
  proxyUrl = await proxy.listen();
  client = await connectHttpTaskClient(proxyUrl, { ledger: join(dir, 'ledger.db') });
}, 120_000);

afterAll(async () => {
  await client?.close();
  proxy?.close();
  await Promise.all(instances.map((p) => p.stop()));
  await database?.drop();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('many instances on one PostgreSQL database', () => {
  it('input and cancel sent to one instance reach the handler on the other within a second', async () => {
    const [a, b] = instances.map((p) => p.url) as [string, string];
    const deploy = await rpc(
      a,
      'tools/call',
      { name: 'approve_deploy', arguments: { env: 'staging', deployMs: 0 } },
      { capabilities: { elicitation: {} } },
    );
    const deployId = deploy.result!['taskId'] as string;
    await waitFor('the approval request, read on the other instance', async () =>
      (await rpc(b, 'tasks/get', { taskId: deployId })).result?.['status'] === 'input_required' ? true : undefined,
    );
    const answeredAt = Date.now();
    await rpc(b, 'tasks/update', {
      taskId: deployId,
      inputResponses: { approval: { action: 'accept', content: { approve: true } } },
    });
    const done = await waitFor('the deploy to complete', async () => {
      const r = await rpc(b, 'tasks/get', { taskId: deployId });
      return r.result?.['status'] === 'completed' ? r.result : undefined;
    });
    expect(done).toMatchObject({ result: { content: [{ text: 'Deployed to staging' }] } });
    expect(Date.now() - answeredAt).toBeLessThan(1000);

    const batch = await rpc(a, 'tools/call', { name: 'batch_job', arguments: { items: 100, stepMs: 100 } });
    const batchId = batch.result!['taskId'] as string;
    const cancelledAt = Date.now();
    expect((await rpc(b, 'tasks/cancel', { taskId: batchId })).error).toBeUndefined();
    await waitFor('the cancel to take effect', async () =>
      (await rpc(a, 'tasks/get', { taskId: batchId })).result?.['status'] === 'cancelled' ? true : undefined,
    );
    expect(Date.now() - cancelledAt).toBeLessThan(1000);
  });

  it('closes out every task through the proxy when one instance dies mid-task', async () => {
    const handles: { handle: TaskHandle; tool: string }[] = [];
    for (let i = 0; i < 6; i++) {
      for (const tool of ['batch_job', 'export_report']) {
        const args = tool === 'batch_job' ? { items: 25, stepMs: 200 } : { pages: 25, pageMs: 200 };
        const handle = await client.callTool(tool, args, { correlationId: `${tool}-${i}` });
        if (!isTaskHandle(handle)) throw new Error(`${tool} answered inline`);
        handles.push({ handle, tool });
      }
    }
    // both instances run some of the tasks
    const onFirst = handles.filter(({ handle }) => proxy.createdOn.get(handle.taskId) === 0);
    expect(onFirst.length).toBeGreaterThan(0);
    expect(onFirst.length).toBeLessThan(handles.length);

    await new Promise((resolve) => setTimeout(resolve, 600));
    // on a loaded machine the twelve creates alone can take longer than a task runs: a task of the first instance that
    // ended before the kill is not one this test is about (its outcome is checked against the kill's time)
    const killedAt = Date.now();
    await instances[0]!.kill();

    const outcomes = await Promise.all(handles.map(({ handle }) => handle.outcome()));
    for (const [i, { handle, tool }] of handles.entries()) {
      const outcome = outcomes[i]!;
      const endedBeforeKill = Date.parse(outcome.record.lastUpdatedAt ?? '') < killedAt;
      const diedWithFirst = proxy.createdOn.get(handle.taskId) === 0 && !endedBeforeKill;
      if (tool === 'batch_job') {
        // resumable: re-run by the survivor (attempt 2) only when its instance died, never while both lived
        expect(outcome.kind, handle.taskId).toBe('completed');
        const structured = outcome.kind === 'completed' ? outcome.result.structuredContent : undefined;
        expect(structured).toMatchObject({ processed: 25, attempt: diedWithFirst ? 2 : 1 });
      } else if (diedWithFirst) {
        expect(outcome.kind, handle.taskId).toBe('failed');
        if (outcome.kind === 'failed') expect(outcome.error.message).toMatch(/interrupted by a server restart/);
      } else {
        expect(outcome.kind, handle.taskId).toBe('completed');
      }
    }
    // no task lost: the ledger holds every one as terminal
    const records = await client.list({});
    for (const { handle } of handles) {
      expect(records.find((r) => r.taskId === handle.taskId)?.localState).toBe('terminal');
    }
    expect(proxy.served[1]).toBeGreaterThan(0);
  }, 90_000);
});
