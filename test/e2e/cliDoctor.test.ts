// `closeout doctor` passing on our server (including the ledger round trip through a fresh process) and failing,
// with the right lines, on a deliberately broken one and on one that is not running (in `call`'s words); `closeout demo`
// finishing unattended; `--help` everywhere.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { jsonDocument, runCli } from '../support/cli.js';
import { freePort } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-doctor-'));
let server: ServeProcess;
/** Every handler start on a server of `runLog` (the demo tools write it): a tool the doctor called. */
const toolRuns = (runLog: string) =>
  existsSync(runLog) ? readFileSync(runLog, 'utf8').trim().split('\n').filter(Boolean) : [];
let broken: Server;
let brokenUrl: string;

/**
 * A server that gets the Tasks wire wrong: its discover declares no extension, tasks/get answers any id (also
 * without the capability) and an unknown one with -32603 instead of -32602.
 */
function startBrokenServer(): Promise<Server> {
  const task = () => ({
    taskId: 'broken-task-1',
    status: 'working',
    createdAt: new Date().toISOString(),
    lastUpdatedAt: new Date().toISOString(),
    ttlMs: 60_000,
    pollIntervalMs: 1000,
  });
  const http = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const request = JSON.parse(body || '{}') as { id?: unknown; method?: string; params?: { taskId?: string } };
      const answer = (payload: Record<string, unknown>) =>
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', id: request.id, ...payload }));
      switch (request.method) {
        case 'server/discover':
          return answer({
            result: {
              supportedVersions: ['2026-07-28'],
              capabilities: { tools: {} },
              serverInfo: { name: 'broken', version: '0.0.0' },
            },
          });
        case 'tools/list':
          return answer({ result: { tools: [{ name: 'slow', inputSchema: { type: 'object' } }] } });
        case 'tools/call':
          return answer({ result: { resultType: 'task', ...task() } });
        case 'tasks/get':
          if (request.params?.taskId === 'broken-task-1') return answer({ result: task() });
          return answer({ error: { code: -32603, message: 'something broke' } });
        case 'tasks/cancel':
          return answer({ result: {} });
        default:
          return answer({ error: { code: -32601, message: 'Method not found' } });
      }
    });
  });
  return new Promise((resolve) => http.listen(0, '127.0.0.1', () => resolve(http)));
}

beforeAll(async () => {
  [server, broken] = await Promise.all([startServe(['--store', join(dir, 'server.db')]), startBrokenServer()]);
  brokenUrl = `http://127.0.0.1:${(broken.address() as { port: number }).port}/mcp`;
});

afterAll(async () => {
  await server?.stop();
  await new Promise((resolve) => broken?.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

describe.concurrent('closeout doctor and demo', { timeout: 60_000 }, () => {
  it('passes on a closeout server, including a ledger round trip through a fresh process', async () => {
    const [text, json] = await Promise.all([
      runCli(['doctor', server.url, '--try-listed-tools']),
      runCli(['doctor', server.url, '--json', '--try-listed-tools']),
    ]);
    expect(text.code, text.stderr).toBe(0);
    for (const check of [
      'discover',
      'task handle',
      'poll interval',
      'Mcp-Name',
      'capability',
      'resume',
      'unknown id',
    ]) {
      expect(text.stdout).toMatch(new RegExp(`^PASS  ${check} `, 'm'));
    }
    expect(text.stdout).toMatch(/^PASS {2}resume +a fresh closeout process took task \S+ up from a ledger/m);
    expect(text.stdout.trimEnd().split('\n').at(-1)).toBe('ok: no check failed');
    expect(json.code).toBe(0);
    const doc = jsonDocument(json.stdout);
    expect(doc['ok']).toBe(true);
    expect((doc['checks'] as { name: string; status: string }[]).find((c) => c.name === 'resume')).toMatchObject({
      status: 'pass',
    });
  });

  it('calls no tool unless one is named: the task checks are skipped, saying how to run them', async () => {
    // a server of its own: the other tests here call tools at the same time
    const runLog = join(dir, 'runs-named.jsonl');
    const own = await startServe(['--store', join(dir, 'named.db')], 15_000, { CLOSEOUT_RUN_LOG: runLog });
    try {
      const run = await runCli(['doctor', own.url]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/^PASS {2}discover /m);
      expect(run.stdout).toMatch(/^PASS {2}unknown id /m);
      expect(run.stdout).toMatch(/^SKIP {2}task handle +no tool was called: pass --tool NAME/m);
      expect(toolRuns(runLog)).toHaveLength(0);
      const named = await runCli(['doctor', own.url, '--tool', 'batch_job', '--args', '{"items":1,"stepMs":10}']);
      expect(named.code, named.stderr).toBe(0);
      expect(named.stdout).toMatch(/^PASS {2}task handle +batch_job returned taskId/m);
      expect(toolRuns(runLog).map((line) => (JSON.parse(line) as { tool: string }).tool)).toEqual(['batch_job']);
    } finally {
      await own.stop();
    }
    const help = await runCli(['doctor', '--help']);
    expect(help.stdout).toMatch(/calls no tool you do not name/);
  });

  it('fails on a broken server with one FAIL line per broken promise', async () => {
    const run = await runCli(['doctor', brokenUrl, '--try-listed-tools']);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(
      /^FAIL {2}discover +server\/discover does not declare io\.modelcontextprotocol\/tasks in capabilities\.extensions, yet tools\/call slow answered with a task$/m,
    );
    expect(run.stdout).toMatch(
      /^FAIL {2}unknown id +an unknown taskId answered -32603 "something broke" .*instead of -32602$/m,
    );
    expect(run.stdout).toMatch(/^FAIL {2}capability +tasks\/get without the extension capability answered a result/m);
    expect(run.stdout).toMatch(/^PASS {2}task handle /m);
    expect(run.stdout.trimEnd().split('\n').at(-1)).toBe('failed: see FAIL lines');
  });

  it('says of a server that is not running what `call` says: nothing is listening, start it or check the URL', async () => {
    const url = `http://127.0.0.1:${await freePort()}/mcp`;
    const run = await runCli(['doctor', url]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(
      /^FAIL {2}reachable +nothing is listening at http:\/\/127\.0\.0\.1:\d+\/mcp \(connection refused\): start the server, or check the URL$/m,
    );
  });

  it('the demo runs unattended: a result, a task followed, an input answered, a cancel, a detach and a resume', async () => {
    const run = await runCli(['demo'], { timeoutMs: 50_000 });
    expect(run.code, run.stderr).toBe(0);
    const out = run.stdout;
    expect(out).toContain('✔ result  echo');
    expect(out).toMatch(/✔ completed {2}batch_job /);
    expect(out).toContain('  │ Deploy to staging?');
    expect(out).toContain('answered accept {"approve":true}');
    expect(out).toContain('Deployed to staging');
    expect(out).toMatch(/■ cancelled {2}export_report /);
    expect(out).toMatch(/↷ detached {2}batch_job /);
    expect(out).toMatch(/│ ✔ completed {2}batch_job /);
    expect(out).toMatch(/TASK ID +TOOL +STATUS/);
    expect(out).toContain('✔ demo finished');
    expect(out).not.toContain('\u001b[');
  });

  it('every command has --help, and none shows an empty collection as its default', async () => {
    // the commands `closeout --help` lists, and the sub-commands each one lists in turn (`task show`)
    const commandsIn = (help: string) =>
      [...(/\nCommands:\n([\s\S]*?)(?:\n\n|\n?$)/.exec(help)?.[1] ?? '').matchAll(/^ {2}([a-z]+)\b/gm)]
        .map((m) => m[1]!)
        .filter((name) => name !== 'help');
    const top = await runCli(['--help']);
    const seen: string[] = [];
    // a level at a time, each level's commands at once
    for (let level = commandsIn(top.stdout).map((name) => [name]); level.length > 0;) {
      const runs = await Promise.all(level.map((command) => runCli([...command, '--help'])));
      level = runs.flatMap((run, i) => {
        const command = level[i]!.join(' ');
        seen.push(command);
        expect(run.code, command).toBe(0);
        expect(run.stdout).toContain(`Usage: closeout ${command}`);
        // commander prints `(default: {})` for an option collected into an object: it tells a user nothing
        expect(run.stdout, `closeout ${command} --help`).not.toMatch(/\(default: (\{\}|\[\])\)/);
        return commandsIn(run.stdout).map((name) => [...level[i]!, name]);
      });
    }
    expect(seen.length).toBeGreaterThan(10);
    expect(seen).toContain('task show');
  });
});
