// `closeout serve --retention-ms` is the retention the README promises: a finished task is purged at
// createdAt + ttlMs + retentionMs, and then answers its owner -32602 "Task has expired". The server's clock is moved
// forward with libfaketime (scripts/install-test-tools.sh installs it), so an hour passes in a second.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const HOUR_S = 3600;

const dir = mkdtempSync(join(tmpdir(), 'closeout-retention-'));
let serve: ServeProcess | undefined;

afterAll(async () => {
  await serve?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!existsSync(LIBFAKETIME))('closeout serve --retention-ms', () => {
  it('purges a finished task at createdAt + ttlMs + retention, not before', async () => {
    const offset = join(dir, 'faketime');
    // the server's wall clock is this file's offset from now; its timers keep real time
    const setOffset = (seconds: number) => writeFileSync(offset, `+${seconds}`);
    setOffset(0);
    serve = await startServe(
      ['--store', join(dir, 'tasks.db'), '--lease-ms', '600', '--retention-ms', '60000'],
      30_000,
      {
        LD_PRELOAD: LIBFAKETIME,
        FAKETIME_TIMESTAMP_FILE: offset,
        FAKETIME_NO_CACHE: '1',
        DONT_FAKE_MONOTONIC: '1',
      },
    );
    const created = await rpc(serve.url, 'tools/call', { name: 'batch_job', arguments: { items: 1, stepMs: 0 } });
    const taskId = created.result!['taskId'] as string;
    await waitFor('the task to complete', async () =>
      (await rpc(serve!.url, 'tasks/get', { taskId })).result?.['status'] === 'completed' ? true : undefined,
    );

    // past the default TTL of one hour, within the minute of retention: kept, through several sweeps
    setOffset(HOUR_S + 20);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    expect((await rpc(serve.url, 'tasks/get', { taskId })).result?.['status']).toBe('completed');

    // past createdAt + ttlMs + retention: purged (the default retention of an hour would keep it)
    setOffset(HOUR_S + 90);
    const expired = await waitFor('the purge', async () => {
      const answer = await rpc(serve!.url, 'tasks/get', { taskId });
      return answer.error ? answer.error : undefined;
    });
    expect(expired).toMatchObject({ code: -32602, message: expect.stringMatching(/expired/) });
  }, 60_000);
});
