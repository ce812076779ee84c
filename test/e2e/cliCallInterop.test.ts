// `closeout call` against a server that is not Closeout: an MRTR round on tools/call answered from --accept (the
// call retried with the answer, its result printed), and with --json nothing but the documented JSON on stdout,
// whatever the SDK logs on the way (it console.debug()s when a server does not advertise the tools capability).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { FixtureServer } from '../client/fixtures/tasksFixtureServer.js';
import { startTasksFixture } from '../client/fixtures/tasksFixtureServer.js';
import { jsonDocument, runCli } from '../support/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-interop-'));
const CONSOLE_ON_REQUEST = fileURLToPath(new URL('./fixtures/consoleOnRequest.mjs', import.meta.url));
let fixture: FixtureServer;

beforeAll(async () => {
  fixture = await startTasksFixture({ noToolsCapability: true });
});
afterAll(async () => {
  await fixture.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('closeout call against a foreign server', { timeout: 60_000 }, () => {
  it('prints only the JSON document on stdout with --json, whatever the SDK logs', async () => {
    const run = await runCli(['call', fixture.url.href, 'echo', '--arg', 'text=hi', '--json'], {
      ledger: join(dir, 'a.db'),
    });
    expect(run.code, run.stderr).toBe(0);
    // one JSON document and nothing else: a stray log line would make this throw
    const doc = jsonDocument(run.stdout);
    expect(doc).toMatchObject({ event: 'closeout', outcome: 'completed', tool: 'echo' });
    expect(run.stdout).not.toContain('listTools');
  });

  it('keeps stdout JSON only when a library logs on the console mid-command', async () => {
    const run = await runCli(['call', fixture.url.href, 'echo', '--arg', 'text=hi', '--json'], {
      ledger: join(dir, 'd.db'),
      env: { NODE_OPTIONS: `--import=${CONSOLE_ON_REQUEST}` },
    });
    expect(run.code, run.stderr).toBe(0);
    // the library did log (there was something to leak), and every line of it went to stderr
    for (const method of ['log', 'info', 'debug', 'dir']) expect(run.stderr).toContain(`console-leak: ${method}`);
    expect(jsonDocument(run.stdout)).toMatchObject({ event: 'closeout', outcome: 'completed', tool: 'echo' });
  });

  it('answers an MRTR round of tools/call from --accept and prints the result', async () => {
    const run = await runCli(['call', fixture.url.href, 'mrtr-plain', '--accept', '{"value":"Ada"}', '--json'], {
      ledger: join(dir, 'b.db'),
    });
    expect(run.code, run.stderr).toBe(0);
    const lines = run.stdout.split('\n').filter((line) => line.length > 0);
    const last = JSON.parse(lines.at(-1)!) as Record<string, unknown>;
    expect(last).toMatchObject({ event: 'closeout', outcome: 'completed', tool: 'mrtr-plain' });
    expect(last['result']).toMatchObject({ content: [{ type: 'text', text: 'hello Ada' }] });
    const legs = fixture.requests.filter((r) => r.method === 'tools/call' && r.params['name'] === 'mrtr-plain');
    expect(legs.map((leg) => leg.params['requestState'])).toEqual([undefined, 'r1']);
  });

  it('ends the call with a clear error when the round asks for input it cannot give (no terminal, no flags)', async () => {
    const run = await runCli(['call', fixture.url.href, 'mrtr-plain', '--json'], { ledger: join(dir, 'c.db') });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('needs input this client could not give');
    expect(run.stderr).not.toContain('unknown');
  });
});
