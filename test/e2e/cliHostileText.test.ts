// Nothing a server chooses reaches the terminal as anything but words: taskIds, tool names, status messages, results,
// JSON-RPC error messages and HTTP error bodies full of escape sequences, C1 controls, bidi overrides and line
// separators leave `closeout`'s stdout and stderr (text and --json) without a single control character, and never
// start a line of their own (RELIABILITY.md, "Power loss, disk growth and a hostile server's text").
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type CliRun, runCli } from '../support/cli.js';
import { FAKE_LINE, type HostileTextServer, startHostileTextServer } from './fixtures/hostileTextServer.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-hostile-text-'));
let ledgers = 0;
const newLedger = () => join(dir, `ledger-${++ledgers}.db`);
let server: HostileTextServer;

beforeAll(async () => {
  server = await startHostileTextServer();
});

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

// every C0 control but \n, DEL, every C1 control, bidi embeddings/overrides/isolates and marks, line/paragraph separators
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/u;

/** The output of a run is safe for a terminal: no control character at all (no TTY, so no colour), no fake line. */
function expectSafe(run: CliRun, what: string): void {
  for (const [stream, text] of [
    ['stdout', run.stdout],
    ['stderr', run.stderr],
  ] as const) {
    const found = UNSAFE.exec(text);
    expect(
      found,
      `${what}: ${stream} carries U+${found?.[0].codePointAt(0)?.toString(16).padStart(4, '0')}: ${JSON.stringify(text)}`,
    ).toBeNull();
    for (const line of text.split('\n'))
      expect(line.startsWith(FAKE_LINE), `${what}: fake line on ${stream}`).toBe(false);
  }
}

// each CLI run is a process start: a few seconds apiece on a loaded machine
describe.concurrent('a hostile server cannot write to the terminal', { timeout: 180_000 }, () => {
  it('a task whose messages and result are hostile: call, show, ls, in text and JSON', async () => {
    const ledger = newLedger();
    const url = server.url.href;
    const call = await runCli(['call', url, 'evil-text'], { ledger });
    expectSafe(call, 'call evil-text');
    expect(call.code).toBe(0);
    expect(call.stdout).toContain('result');
    const json = await runCli(['call', url, 'evil-text', '--json'], { ledger });
    expectSafe(json, 'call evil-text --json');
    expect(json.code).toBe(0);
    // the JSON still carries the server's words exactly, escaped
    const last = JSON.parse(json.stdout.trim().split('\n').pop()!) as { result: { content: { text: string }[] } };
    expect(last.result.content[0]!.text).toContain('\u001b]0;pwned');
    const taskId = (JSON.parse(json.stdout.trim().split('\n').pop()!) as { taskId: string }).taskId;
    for (const args of [
      ['ls', '--all', '--json'],
      ['show', taskId],
    ]) {
      const run = await runCli(args, { ledger });
      expectSafe(run, args.join(' '));
      expect(run.code).toBe(0);
    }
  });

  it('a failed task, a refused call, a hostile taskId and an unknown tool', async () => {
    const url = server.url.href;
    const failed = await runCli(['call', url, 'evil-failed'], { ledger: newLedger() });
    expectSafe(failed, 'call evil-failed');
    expect(failed.stdout).toContain('boom');
    const refused = await runCli(['call', url, 'evil-refused'], { ledger: newLedger() });
    expectSafe(refused, 'call evil-refused');
    expect(refused.stdout).toContain('refused');
    const badId = await runCli(['call', url, 'evil-id'], { ledger: newLedger() });
    expectSafe(badId, 'call evil-id');
    expect(badId.code).not.toBe(0);
    const unknownTool = await runCli(['call', url, 'no-such-tool'], { ledger: newLedger() });
    expectSafe(unknownTool, 'call no-such-tool');
    expect(unknownTool.stderr).toContain('has no tool');
  });

  it('an HTTP error body, and doctor reading a hostile server', async () => {
    const http = await runCli(['call', server.httpErrorUrl.href, 'evil-text'], { ledger: newLedger() });
    expectSafe(http, 'call against an HTTP error');
    expect(http.code).not.toBe(0);
    for (const args of [
      ['doctor', server.url.href, '--try-listed-tools'],
      ['doctor', server.url.href, '--json', '--try-listed-tools'],
    ]) {
      const run = await runCli(args, { ledger: newLedger() });
      expectSafe(run, args.join(' '));
    }
  });
});
