// Invariant (RELIABILITY.md, "Client handles, close and connections"): close() while a tools/call is in flight leaves
// the call settled and the record true.
// The server's answer is awaited, not cut off: the taskId it carries is committed, the handle the call resolves with
// is settled (rejected as closed), and the record is open with its lease handed back, so another process resumes it.
// This holds for an SDK client the application connected itself and for one connectHttpTaskClient made.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { describe, expect, it } from 'vitest';

import type { PollPolicy, TaskClient, TaskHandle } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle, SqliteLedger, TaskClient as Tasks } from '../../src/client/index.js';
import { waitFor } from '../support/waitFor.js';
import { useClientHarness } from './fixtures/clientHarness.js';

const FAST: Partial<PollPolicy> = { floorMs: 5, capMs: 100, defaultIntervalMs: 20, backoffBaseMs: 10 };

const harness = useClientHarness('close', FAST);

/** A fetch whose tools/call answers are held back until `release()`: a slow server, seen from the client. */
function holdingFetch(): { fetch: typeof fetch; release: () => void; held: () => boolean } {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let held = false;
  const holding: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (typeof init?.body === 'string' && init.body.includes('"tools/call"')) {
      held = true;
      await gate;
    }
    return response;
  };
  return { fetch: holding, release, held: () => held };
}

/** The settled outcome's kind (and reason) / the rejection's code, or 'pending' when nothing settled within `ms`. */
async function settlement(handle: TaskHandle, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
  try {
    return await Promise.race([
      handle.outcome().then(
        (outcome) => (outcome.kind === 'detached' ? `detached:${outcome.reason}` : outcome.kind),
        (error: { code?: string }) => error.code ?? 'rejected',
      ),
      pending,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function closeDuringCall(client: TaskClient, release: () => void, held: () => boolean): Promise<TaskHandle> {
  const call = client.callTool('cancellable', { n: 1 });
  await waitFor('the tools/call answer to be held', () => (held() ? true : undefined));
  const closing = client.close();
  release();
  const [answer] = await Promise.all([call, closing]);
  if (!isTaskHandle(answer)) throw new Error('cancellable answered without a task');
  return answer;
}

async function expectResumable(handle: TaskHandle): Promise<void> {
  // the task is still open, left for a later resumeAll(): detached, as TaskOutcome says, not a rejection
  expect(await settlement(handle, 3_000)).toBe('detached:client-closed');
  await expect(handle.result()).rejects.toMatchObject({ code: 'closed' });
  const ledger = new SqliteLedger(harness.ledgerPath);
  try {
    const record = await ledger.get(handle.recordId);
    expect(record).toMatchObject({ taskId: handle.taskId, localState: 'tracking', leaseHolder: undefined });
  } finally {
    await ledger.dispose();
  }
  const next = await connectHttpTaskClient(harness.fixture.url, { ledger: harness.ledgerPath, pollPolicy: FAST });
  harness.track(next);
  const report = await next.resumeAll();
  expect(report.resumed.map((resumed) => resumed.taskId)).toEqual([handle.taskId]);
  expect(report.unknownOutcome).toEqual([]);
  expect(harness.fixture.runs.get('cancellable')).toBe(1);
}

describe('close() while callTool() is in flight', () => {
  it('settles the call and hands the record back, on an SDK client the application owns', async () => {
    const { fetch: holding, release, held } = holdingFetch();
    const sdk = new Client({ name: 'app', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await sdk.connect(new StreamableHTTPClientTransport(harness.fixture.url, { fetch: holding }));
    const ledger = new SqliteLedger(harness.ledgerPath);
    const client = new Tasks({ client: sdk, ledger, endpoint: harness.fixture.url.href, pollPolicy: FAST });
    try {
      await expectResumable(await closeDuringCall(client, release, held));
    } finally {
      await sdk.close();
      await ledger.dispose();
    }
  });

  it('settles the call and hands the record back, with connectHttpTaskClient', async () => {
    const { fetch: holding, release, held } = holdingFetch();
    const client = await connectHttpTaskClient(harness.fixture.url, {
      ledger: harness.ledgerPath,
      pollPolicy: FAST,
      fetch: holding,
    });
    await expectResumable(await closeDuringCall(client, release, held));
  });
});
