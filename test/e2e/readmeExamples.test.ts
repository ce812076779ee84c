/**
 * README.md's server and client examples fit together and run as written: both are taken from the README's code
 * blocks, the server runs in one process and the client in another against it over loopback, and the client's task
 * closes out. Only the port changes (3000 may be taken), and only where the README writes it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { runCli } from '../support/cli.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The ```ts blocks of README.md that contain `marker`. */
async function examples(marker: string): Promise<string[]> {
  const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  return [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)]
    .map((match) => match[1]!)
    .filter((code) => code.includes(marker));
}

/** `code` with `from` replaced by `to`, failing when the README no longer writes `from` exactly once. */
function replaceOnce(code: string, from: string, to: string): string {
  expect(code.split(from).length - 1, `the example writes ${from} once`).toBe(1);
  return code.replace(from, to);
}

/** The example as the JavaScript a user's build would run (types stripped, nothing checked: the run checks). */
function javascript(code: string): string {
  return ts.transpileModule(code, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
}

interface Exited {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function start(file: string, cwd: string): { child: ChildProcess; stdout: () => string; stderr: () => string } {
  const child = spawn(process.execPath, [file], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return { child, stdout: () => stdout, stderr: () => stderr };
}

let dir: string;
let server: ReturnType<typeof start> | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'closeout-readme-'));
  // the package as a user's project sees it: `closeout` and `zod` in node_modules
  await mkdir(join(dir, 'node_modules'));
  await symlink(ROOT, join(dir, 'node_modules', 'closeout'), 'dir');
  await symlink(join(ROOT, 'node_modules', 'zod'), join(dir, 'node_modules', 'zod'), 'dir');
});

afterAll(async () => {
  const child = server?.child;
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('README.md examples', () => {
  it('the client example closes out a task of the server example, each in its own process', async () => {
    const servers = await examples("from 'closeout/server'");
    const clients = await examples("from 'closeout/client'");
    expect(servers, 'one server example').toHaveLength(1);
    expect(clients, 'one client example').toHaveLength(1);

    await writeFile(join(dir, 'server.mjs'), javascript(replaceOnce(servers[0]!, '{ port: 3000 }', '{ port: 0 }')));
    server = start('server.mjs', dir);
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no URL in 30 s: ${server!.stderr()}`)), 30_000);
      server!.child.stdout!.on('data', () => {
        const line = server!.stdout().split('\n')[0];
        if (server!.stdout().includes('\n') && line) {
          clearTimeout(timer);
          resolve(line.trim());
        }
      });
      server!.child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the server example exited with ${code}: ${server!.stderr()}`));
      });
    });
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);

    await writeFile(
      join(dir, 'client.mjs'),
      javascript(replaceOnce(clients[0]!, "'http://127.0.0.1:3000/mcp'", JSON.stringify(url))),
    );
    const client = start('client.mjs', dir);
    const timer = setTimeout(() => client.child.kill('SIGKILL'), 60_000);
    const [code, signal] = (await once(client.child, 'close')) as [number | null, NodeJS.Signals | null];
    clearTimeout(timer);
    const run: Exited = { code, signal, stdout: client.stdout(), stderr: client.stderr() };

    // the client asked once, the task completed with the answer, and the process ended by itself after close()
    expect(run, run.stderr).toMatchObject({ code: 0, signal: null, stderr: '' });
    expect(run.stdout.match(/the server asks: Publish\?/g)).toHaveLength(1);
    // the client's handler accepted with no content: the form's default comes back, parsed
    expect(run.stdout).toContain("completed [ { type: 'text', text: 'published to web' } ]");
    expect(run.stdout).toMatch(/working -> .*input_required -> .*completed/);
    // the server example itself raised no complaint while serving it
    expect(server.stderr()).toBe('');
  }, 120_000);

  it('the CLI page synopsis lists every option of every command, and its exit-code table says what answer does', async () => {
    const readme = await readFile(join(ROOT, 'docs', 'cli.md'), 'utf8');
    const synopsis = /^## Commands\n\n```sh\n([\s\S]*?)^```$/m.exec(readme)?.[1];
    expect(synopsis, 'docs/cli.md has a Commands synopsis').toBeDefined();
    // each command's entry: its line and the indented lines that continue it
    const entries = new Map<string, string>();
    let current: string | undefined;
    for (const line of synopsis!.split('\n')) {
      const named = /^closeout (\w+)/.exec(line);
      if (named) current = named[1]!;
      if (current !== undefined && (named || /^\s/.test(line))) {
        entries.set(current, `${entries.get(current) ?? ''} ${line}`);
      }
    }
    const commands = [
      'serve',
      'doctor',
      'tools',
      'call',
      'ls',
      'show',
      'resume',
      'answer',
      'cancel',
      'resubmit',
      'demo',
      'bridge',
      'tasks',
      'task',
      'console',
    ];
    expect([...entries.keys()].sort()).toEqual([...commands].sort());
    const helps = await Promise.all(
      commands.map((command) =>
        // `task` is a group of one: its options are `task show`'s
        runCli(command === 'task' ? ['task', 'show', '--help'] : [command, '--help'], { timeoutMs: 60_000 }),
      ),
    );
    helps.forEach((help, i) => {
      const options = [...help.stdout.matchAll(/^\s+(?:-\w, )?(--[\w-]+)/gm)].map((m) => m[1]!);
      expect(options.length, commands[i]).toBeGreaterThan(0);
      for (const option of options.filter((o) => o !== '--help')) {
        expect(entries.get(commands[i]!), `closeout ${commands[i]} ${option} in the synopsis`).toMatch(
          new RegExp(`[[|] ?${option}\\b`),
        );
      }
    });

    // `answer` without a terminal and without an answer flag is bad input: 1, as the table's row for 1 says
    const answer = await runCli(['answer', 'some-task', '--ledger', join(dir, 'no-ledger.db')], { timeoutMs: 60_000 });
    expect(answer.code).toBe(1);
    const row = (code: number) => new RegExp(`^\\| ${code} +\\|(.*)\\|$`, 'm').exec(readme)?.[1] ?? '';
    expect(row(1)).toContain('`answer` with no terminal');
    expect(row(5)).not.toMatch(/^\s*The task needs input/);
  }, 120_000);
});
