/**
 * README.md's server and client examples fit together and run as written: both are taken from the README's code
 * blocks, the server runs in one process and the client in another against it over loopback, and the client's task
 * closes out. Only the port changes (3000 may be taken), and only where the README writes it.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { runCli } from '../support/cli.js';
import {
  cleanUp,
  examples,
  javascript,
  replaceOnce,
  ROOT,
  runToEnd,
  type Started,
  startReadmeServer,
  userProject,
} from '../support/readmeExamples.js';

let dir: string;
let server: Started | undefined;

beforeAll(async () => {
  // the package as a user's project sees it: `closeout` and `zod` in node_modules
  dir = await userProject('closeout-readme-', ['zod']);
});

afterAll(async () => {
  await cleanUp(server, dir);
});

describe('README.md examples', () => {
  it('the client example closes out a task of the server example, each in its own process', async () => {
    // the client example; the framework examples (readmeFrameworks.test.ts) are clients too
    const clients = await examples("import { connectHttpTaskClient, isTaskHandle } from 'closeout/client'");
    expect(clients, 'one client example').toHaveLength(1);

    const started = await startReadmeServer(dir);
    server = started.server;
    await writeFile(
      join(dir, 'client.mjs'),
      javascript(replaceOnce(clients[0]!, "'http://127.0.0.1:3000/mcp'", JSON.stringify(started.url))),
    );
    const run = await runToEnd('client.mjs', dir);

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
