// Invariant (RELIABILITY.md, "Client handles, close and connections"): one server has one identity in the ledger
// whatever URL spelling reaches it (scheme and host case, default port, trailing slash, loopback name), so one
// idempotency key makes one record and one run, and one server task is never driven from two records; rows an earlier
// build stored under another spelling are adopted by the spelling the ledger already uses, except a row that would
// duplicate a task or a live key, which stays apart.
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import type { PollPolicy } from '../../src/client/index.js';
import { isTaskHandle, SqliteLedger } from '../../src/client/index.js';
import { endpointIdentity } from '../../src/client/ledger/endpointIdentity.js';
import { argumentsDigest } from '../../src/client/submitting/argumentsDigest.js';
import { deadHolderId } from '../support/deadHolder.js';
import { useClientHarness } from './fixtures/clientHarness.js';

const FAST: Partial<PollPolicy> = { floorMs: 5, capMs: 100, defaultIntervalMs: 20, backoffBaseMs: 10 };
const ARGS = { order: 9 };
const KEY = 'order-9';

const harness = useClientHarness('endpoint', FAST);

/** Other spellings of the fixture's URL (http://127.0.0.1:PORT/mcp) that reach it (it listens on IPv4 only). */
function spellings(): string[] {
  const port = harness.fixture.url.port;
  return [`http://localhost:${port}/mcp/`, `HTTP://LocalHost:${port}/mcp`, `http://127.0.0.1:${port}/mcp/`];
}

describe('endpointIdentity', () => {
  it('gives one identity to the spellings of one URL and keeps what names another server', () => {
    const id = endpointIdentity('http://127.0.0.1:3000/mcp');
    for (const same of [
      'http://localhost:3000/mcp/',
      'HTTP://LOCALHOST:3000/mcp',
      'http://[::1]:3000/mcp//',
      'http://user:secret@127.0.0.1:3000/mcp#top',
    ]) {
      expect(endpointIdentity(same)).toBe(id);
    }
    expect(endpointIdentity('https://Example.COM:443/mcp/')).toBe(endpointIdentity('https://example.com/mcp'));
    expect(endpointIdentity('http://example.com:80/')).toBe(endpointIdentity('http://example.com'));
    for (const other of [
      'https://127.0.0.1:3000/mcp',
      'http://127.0.0.1:3001/mcp',
      'http://127.0.0.1:3000/MCP',
      'http://127.0.0.1:3000/mcp?tenant=a',
      'http://127.0.0.2:3000/mcp',
    ]) {
      expect(endpointIdentity(other)).not.toBe(id);
    }
    expect(endpointIdentity('http://127.0.0.1:3000/mcp')).not.toContain('secret');
    expect(endpointIdentity('stdio:/usr/bin/node server.js')).toBe('stdio:/usr/bin/node server.js');
  });
});

describe('one server under two URL spellings', () => {
  it('makes one record and one run of one idempotency key', async () => {
    const first = await harness.connect({}, harness.fixture.url.href);
    const handle = await first.callTool('cancellable', ARGS, { idempotencyKey: KEY });
    if (!isTaskHandle(handle)) throw new Error('cancellable answered without a task');
    for (const spelling of spellings()) {
      const other = await harness.connect({}, spelling);
      // the one record is followed by `first`: never a second record, never a second run
      await expect(other.callTool('cancellable', ARGS, { idempotencyKey: KEY })).rejects.toMatchObject({
        code: 'leased-elsewhere',
        taskId: handle.taskId,
      });
      expect((await other.get(KEY))?.recordId).toBe(handle.recordId);
    }
    expect(harness.fixture.runs.get('cancellable')).toBe(1);
    const ledger = new SqliteLedger(harness.ledgerPath);
    try {
      expect(await ledger.list({ idempotencyKey: KEY })).toHaveLength(1);
    } finally {
      await ledger.dispose();
    }
  });

  it('adopts the rows an earlier build stored under other spellings, and drives one task from one record', async () => {
    // a task on the server, and an earlier build's ledger that recorded it twice under two spellings
    const maker = await harness.connect({ ledger: join(harness.dir, 'maker.db') }, harness.fixture.url.href);
    const made = await maker.callTool('cancellable', ARGS, { idempotencyKey: KEY });
    if (!isTaskHandle(made)) throw new Error('cancellable answered without a task');
    await made.detach();
    const observed = await made.record();
    const old = new SqliteLedger(harness.ledgerPath);
    const [slash, named] = spellings();
    const past = Date.now() - 60_000;
    // a process of an earlier build, since gone
    const earlierBuild = deadHolderId();
    for (const [index, endpoint] of [slash, named].entries()) {
      const recordId = `old-${index}`;
      await old.recordIntent({
        recordId,
        endpoint: endpoint as string,
        toolName: 'cancellable',
        arguments: ARGS,
        argumentsDigest: argumentsDigest(ARGS),
        idempotencyKey: KEY,
        submittedAt: past + index,
        leaseHolder: earlierBuild,
        leaseExpiresAt: past + 1_000,
      });
      await old.markSent(recordId, earlierBuild, past + index);
      await old.commitTask(
        recordId,
        earlierBuild,
        {
          taskId: made.taskId,
          status: 'working',
          statusMessage: undefined,
          createdAt: observed.createdAt as string,
          lastUpdatedAt: observed.lastUpdatedAt as string,
          ttlMs: observed.ttlMs ?? null,
          pollIntervalMs: observed.pollIntervalMs ?? 20,
        },
        past + index,
      );
    }
    await old.dispose();

    const client = await harness.connect({}, harness.fixture.url.href);
    const again = await client.callTool('cancellable', ARGS, { idempotencyKey: KEY });
    if (!isTaskHandle(again)) throw new Error('cancellable answered without a task');
    expect(again.taskId).toBe(made.taskId);
    expect(again.recordId).toBe('old-0'); // the spelling used first is the one kept
    expect(harness.fixture.runs.get('cancellable')).toBe(1);
    const report = await client.resumeAll();
    expect(report.resumed.map((handle) => handle.recordId)).toEqual(['old-0']);
    await client.cancel(made.taskId);
    expect(await again.outcome()).toMatchObject({ kind: 'cancelled' });
  });
});
