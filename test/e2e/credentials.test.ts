// Invariants (docs/DESIGN.md rule 5, "A credential is part of a record's identity"), as real `closeout` processes
// against real `closeout serve` processes: CLOSEOUT_TOKEN goes only to the server it was given for; a -32602 under
// another credential than the one a record was created under is not expiry; an `expired` record is checked again by
// `show --refresh` and `resume TASK_ID` and comes back when the server still knows the task; an idempotency key used as
// a business id by two callers (two ledgers, one principal) never hands one caller the other's task, and the key on
// the wire cannot be guessed from the business id.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { type CliOptions, jsonDocument, jsonLines, runCli as run } from '../support/cli.js';
import { freePort } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-credentials-'));
let files = 0;
const file = (name: string) => join(dir, `${++files}-${name}`);
const servers: ServeProcess[] = [];
const proxies: Server[] = [];

afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
  for (const proxy of proxies) proxy.close();
  rmSync(dir, { recursive: true, force: true });
});

async function serve(args: string[]): Promise<ServeProcess> {
  const server = await startServe(args, 60_000);
  servers.push(server);
  return server;
}

/** A pass-through HTTP proxy to `target` that remembers every Authorization header it saw. */
async function recordingProxy(target: string): Promise<{ url: string; authorizations: string[] }> {
  const upstream = new URL(target);
  const authorizations: string[] = [];
  const proxy = createServer((incoming: IncomingMessage, answer) => {
    if (incoming.headers.authorization) authorizations.push(incoming.headers.authorization);
    const forwarded = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        path: incoming.url,
        method: incoming.method,
        headers: incoming.headers,
      },
      (response) => {
        answer.writeHead(response.statusCode ?? 502, response.headers);
        response.pipe(answer);
      },
    );
    forwarded.on('error', () => answer.destroy());
    incoming.pipe(forwarded);
  });
  proxies.push(proxy);
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const { port } = proxy.address() as { port: number };
  return { url: `http://127.0.0.1:${port}/mcp`, authorizations };
}

/** The CLI with a deadline fit for a loaded machine. */
const runCli = (args: string[], options: CliOptions) => run(args, { timeoutMs: 90_000, ...options });

const BATCH = ['batch_job', '--args', '{"items":4,"stepMs":300}'];

describe('credentials and secrets', { timeout: 180_000 }, () => {
  it('sends CLOSEOUT_TOKEN only to the server it was given for, not to every server with an open record', async () => {
    const ledger = file('ledger.db');
    const trusted = await serve(['--store', file('trusted.db'), '--token', 'tok-alice=alice']);
    const other = await serve(['--store', file('other.db')]);
    const untrusted = await recordingProxy(other.url);
    const mine = await runCli(['call', trusted.url, ...BATCH, '--detach'], {
      ledger,
      env: { CLOSEOUT_TOKEN: 'tok-alice' },
    });
    expect(mine.code, mine.stderr).toBe(0);
    const theirs = await runCli(['call', untrusted.url, ...BATCH, '--detach'], { ledger });
    expect(theirs.code, theirs.stderr).toBe(0);
    const resumed = await runCli(['resume', '--json'], {
      ledger,
      env: { CLOSEOUT_TOKEN: 'tok-alice' },
    });
    const closeOuts = jsonLines(resumed.stdout).filter((event) => event['event'] === 'closeout');
    expect(
      closeOuts.map((event) => event['outcome']),
      resumed.stdout + resumed.stderr,
    ).toEqual(['completed', 'completed']);
    expect(untrusted.authorizations).toEqual([]);
  });

  it('does not expire a record on a -32602 under another credential; the right one closes it out', async () => {
    const ledger = file('ledger.db');
    const server = await serve([
      '--store',
      file('server.db'),
      '--token',
      'tok-alice=alice',
      '--token',
      'tok-mallory=mallory',
    ]);
    const call = await runCli(['call', server.url, ...BATCH, '--detach'], {
      ledger,
      env: { CLOSEOUT_TOKEN: 'tok-alice' },
    });
    const taskId = call.stdout.trim();
    const wrong = await runCli(['resume', '--json'], {
      ledger,
      env: { CLOSEOUT_TOKEN: 'tok-mallory', CLOSEOUT_TOKEN_SERVER: server.url },
    });
    expect(wrong.stdout + wrong.stderr).toMatch(/under another credential/);
    const shown = jsonDocument((await runCli(['show', taskId, '--json'], { ledger })).stdout);
    expect(shown['record']).toMatchObject({ localState: 'tracking', taskId });
    const right = await runCli(['resume', '--json'], {
      ledger,
      env: { CLOSEOUT_TOKEN: 'tok-alice' },
    });
    expect(
      jsonLines(right.stdout).find((e) => e['event'] === 'closeout'),
      right.stdout + right.stderr,
    ).toMatchObject({
      taskId,
      outcome: 'completed',
    });
    // the record keeps a fingerprint of the credential, never the token: not in a column, not in any page of the files
    const db = openDatabase(ledger, { readonly: true });
    try {
      const rows = db.prepare('SELECT credential FROM submissions').all() as { credential: string | null }[];
      expect(rows.length).toBeGreaterThan(0);
      for (const row of rows) {
        expect(row.credential).toEqual(expect.any(String));
        expect(row.credential).not.toContain('tok-alice');
      }
    } finally {
      db.close();
    }
    for (const path of [ledger, `${ledger}-wal`]) {
      if (existsSync(path)) expect(readFileSync(path).includes('tok-alice'), path).toBe(false);
    }
  });

  it('checks an expired record again and takes it back when the server still knows the task', async () => {
    const ledger = file('ledger.db');
    const store = file('server.db');
    const port = String(await freePort());
    const env = { CLOSEOUT_TOKEN: 'tok-1' };
    const first = await serve(['--port', port, '--store', store, '--token', 'tok-1=alice']);
    const taskId = (await runCli(['call', first.url, ...BATCH, '--detach'], { ledger, env })).stdout.trim();
    await first.stop();
    // misconfigured: the token now maps to another principal, so the task looks unknown under the same credential
    const misconfigured = await serve(['--port', port, '--store', store, '--token', 'tok-1=carol']);
    const expired = await runCli(['resume', '--json'], { ledger, env });
    expect(
      jsonLines(expired.stdout).find((e) => e['event'] === 'closeout'),
      expired.stdout,
    ).toMatchObject({
      outcome: 'expired',
    });
    await misconfigured.stop();
    const fixed = await serve(['--port', port, '--store', store, '--token', 'tok-1=alice']);
    expect(fixed.url).toBe(first.url);
    const refreshed = jsonDocument((await runCli(['show', taskId, '--refresh', '--json'], { ledger, env })).stdout);
    expect(refreshed['record'], JSON.stringify(refreshed)).toMatchObject({ taskId });
    expect(['tracking', 'terminal']).toContain((refreshed['record'] as { localState: string }).localState);
    const resumed = await runCli(['resume', taskId, '--json'], { ledger, env });
    expect(
      jsonLines(resumed.stdout).find((e) => e['event'] === 'closeout'),
      resumed.stdout + resumed.stderr,
    ).toMatchObject({
      taskId,
      outcome: 'completed',
    });
  });

  it('checks an expired record again on resume TASK_ID alone', async () => {
    const ledger = file('ledger.db');
    const store = file('server.db');
    const port = String(await freePort());
    const env = { CLOSEOUT_TOKEN: 'tok-2' };
    const first = await serve(['--port', port, '--store', store, '--token', 'tok-2=alice']);
    const taskId = (await runCli(['call', first.url, ...BATCH, '--detach'], { ledger, env })).stdout.trim();
    await first.stop();
    const misconfigured = await serve(['--port', port, '--store', store, '--token', 'tok-2=carol']);
    await runCli(['resume'], { ledger, env });
    await misconfigured.stop();
    await serve(['--port', port, '--store', store, '--token', 'tok-2=alice']);
    const resumed = await runCli(['resume', taskId, '--json'], { ledger, env });
    expect(
      jsonLines(resumed.stdout).find((e) => e['event'] === 'closeout'),
      resumed.stdout + resumed.stderr,
    ).toMatchObject({
      taskId,
      outcome: 'completed',
    });
  });

  it('never hands one caller another caller’s task for the same business key, and hides the key on the wire', async () => {
    const store = file('server.db');
    const server = await serve(['--store', store]);
    const call = (ledger: string) =>
      runCli(['call', server.url, ...BATCH, '--idempotency-key', 'release-42', '--detach'], { ledger });
    const first = await call(file('ledger-a.db'));
    const second = await call(file('ledger-b.db'));
    expect(first.code, first.stderr).toBe(0);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout.trim()).not.toBe(first.stdout.trim());
    const db = openDatabase(store, { readonly: true });
    try {
      const keys = (db.prepare('SELECT idempotency_key FROM tasks').all() as { idempotency_key: string }[]).map(
        (row) => row.idempotency_key,
      );
      expect(keys).toHaveLength(2);
      for (const key of keys) expect(key).not.toContain('release-42');
    } finally {
      db.close();
    }
  });
});
