// What one principal may keep stored is bounded (RELIABILITY.md, "Power loss, disk growth and a hostile server's
// text"): finished tasks kept for their retention count with the open ones, so a caller that calls and lets each task
// finish cannot grow the store without end. Over real HTTP on a real SQLite file: one call over the limit is refused
// with -32603 naming maxStoredTasksPerPrincipal and stores nothing; an idempotent replay is still answered; another
// principal is unaffected.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { rpc } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const MAX = 4;
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer(
    (tasks) => tasks.registerTool('quick', { task: { support: 'required' } }, () => ({ content: [] })),
    {
      server: { maxStoredTasksPerPrincipal: MAX },
      serve: { tokens: { [ALICE]: 'alice', [BOB]: 'bob' } },
    },
  );
});
afterAll(async () => {
  await server.close();
});

const call = (token: string, meta = {}) =>
  rpc(server.url, 'tools/call', { name: 'quick', arguments: {} }, { token, meta });
const finished = (taskId: string, token: string) =>
  waitFor(`task ${taskId} to finish`, async () => {
    const r = await rpc(server.url, 'tasks/get', { taskId }, { token });
    return r.result?.['status'] === 'completed' ? r.result : undefined;
  });

describe('maxStoredTasksPerPrincipal', () => {
  it('refuses one more stored task per principal, finished ones counted, with -32603 naming the limit', async () => {
    const ids: string[] = [];
    for (let i = 0; i < MAX; i++) {
      const r = await call(ALICE, { 'io.closeout/idempotencyKey': `k-${i}` });
      expect(r.error).toBeUndefined();
      ids.push(r.result!['taskId'] as string);
      // finished, not open: the open-task limit would never see these
      await finished(ids[i]!, ALICE);
    }
    const refused = await call(ALICE);
    expect(refused.httpStatus).toBe(200);
    expect(refused.error).toEqual({
      code: -32603,
      message: `Too many stored tasks: this caller already has ${MAX} tasks kept on this server (open, or finished and kept for their retention), this server's limit (maxStoredTasksPerPrincipal); wait for finished ones to be purged, then call again`,
      data: { limit: 'maxStoredTasksPerPrincipal', max: MAX },
    });
    // an idempotent replay is the same task, not a new one: answered at the limit too
    const replay = await call(ALICE, { 'io.closeout/idempotencyKey': 'k-0' });
    expect(replay.result?.['taskId']).toBe(ids[0]);
    // the limit is per principal
    expect((await call(BOB)).result?.['resultType']).toBe('task');
  });
});
