// `closeout tools URL` lists what a server offers, read with tools/list only (nothing called, no ledger made), as a
// table for people and as the full tools/list entries with --json; `closeout call URL` without a tool prints the same
// table, and the samples of README.md and docs/cli.md are lines of it; an unreachable server is one line and exit 1.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { runCli } from '../support/cli.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

let dir: string;
let server: ServeProcess;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-cli-tools-'));
  server = await startServe(['--store', join(dir, 'server.db')]);
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('closeout tools', () => {
  it('lists every tool of the server with its title and input, and records nothing', async () => {
    const home = join(dir, 'home');
    const run = await runCli(['tools', server.url], { env: { HOME: home }, timeoutMs: 60_000 });
    expect(run.code, run.stderr).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^TOOL\s+TITLE\s+TASKS\s+INPUT$/);
    for (const tool of ['batch_job', 'export_report', 'approve_deploy', 'flaky_upstream', 'echo', 'render_job']) {
      expect(lines.some((line) => line.startsWith(`${tool} `))).toBe(true);
    }
    expect(lines.find((line) => line.startsWith('approve_deploy'))).toMatch(
      /Deploy with approval\s+per call\s+env\*: string/,
    );
    expect(lines.at(-1)).toMatch(/^6 tools at /);
    expect(existsSync(join(home, '.closeout'))).toBe(false);
  }, 90_000);

  it('prints the lines README.md and docs/cli.md show of it', async () => {
    const run = await runCli(['tools', server.url], { timeoutMs: 60_000 });
    expect(run.code, run.stderr).toBe(0);
    // the samples were taken from a serve on its default port
    const printed = run.stdout.replaceAll(server.url, 'http://127.0.0.1:3000/mcp').trimEnd().split('\n');
    for (const page of ['README.md', 'docs/cli.md']) {
      const text = readFileSync(join(ROOT, page), 'utf8').split('\n');
      const at = text.findIndex((line) => line.trim() === '$ npx closeout tools http://127.0.0.1:3000/mcp');
      expect(at, page).toBeGreaterThan(0);
      const end = text.findIndex((line, i) => i > at && line.trim().startsWith('```'));
      // a sample may leave rows out (…), never change one
      const shown = text
        .slice(at + 1, end)
        .map((line) => line.trim())
        .filter((line) => line !== '…');
      expect(shown.length, page).toBeGreaterThan(2);
      for (const line of shown) expect(printed, `${page}: ${line}`).toContain(line);
    }
  }, 90_000);

  it('prints the tools/list entries, schemas included, with --json', async () => {
    const run = await runCli(['tools', server.url, '--json'], { timeoutMs: 60_000 });
    expect(run.code, run.stderr).toBe(0);
    const listed = JSON.parse(run.stdout) as { endpoint: string; tools: Array<{ name: string; inputSchema: object }> };
    expect(listed.endpoint).toBe(server.url);
    expect(listed.tools.map((tool) => tool.name).sort()).toEqual(
      ['approve_deploy', 'batch_job', 'echo', 'export_report', 'flaky_upstream', 'render_job'].sort(),
    );
    expect(listed.tools.find((tool) => tool.name === 'echo')?.inputSchema).toMatchObject({
      type: 'object',
      properties: { text: { type: 'string' } },
      required: ['text'],
    });
  }, 90_000);

  it('is what `call URL` without a tool prints, instead of a usage error', async () => {
    const call = await runCli(['call', server.url], { timeoutMs: 60_000 });
    const tools = await runCli(['tools', server.url], { timeoutMs: 60_000 });
    expect(call.code, call.stderr).toBe(0);
    expect(call.stdout).toBe(tools.stdout);
  }, 90_000);

  it('says in one line that an unreachable URL cannot be reached, exit 1', async () => {
    const run = await runCli(['tools', 'http://127.0.0.1:9/mcp'], { timeoutMs: 60_000 });
    expect(run.code).toBe(1);
    expect(run.stderr.trim()).toMatch(/^closeout: (nothing is listening at|cannot reach) http:\/\/127\.0\.0\.1:9\/mcp/);
    expect(run.stdout).toBe('');
  }, 90_000);
});
