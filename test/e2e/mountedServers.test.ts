/**
 * docs/server.md's three ways of adding task tools to an app of your own (node:http, Express, Hono) run as written:
 * each mount, with the page's shared `tasks.ts`, runs in a process of its own, and a real client calls both a task
 * tool (its task closes out) and the app's own tool through it. Only the port and the store's path change.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { connectHttpTaskClient, isTaskHandle } from '../../src/client/index.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

async function serverPageBlocks(): Promise<string[]> {
  const page = await readFile(join(ROOT, 'docs', 'server.md'), 'utf8');
  return [...page.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
}

function javascript(code: string): string {
  return ts.transpileModule(code, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
}

function replaceOnce(code: string, from: string, to: string): string {
  expect(code.split(from).length - 1, `the example writes ${from} once`).toBe(1);
  return code.replace(from, to);
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

let dir: string;
const children: ChildProcess[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'closeout-mounts-'));
  for (const pkg of ['zod', 'express', 'hono', '@hono/node-server']) {
    await mkdir(dirname(join(dir, 'node_modules', pkg)), { recursive: true });
    await symlink(join(ROOT, 'node_modules', pkg), join(dir, 'node_modules', pkg), 'dir');
  }
  await symlink(ROOT, join(dir, 'node_modules', 'closeout'), 'dir');
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('docs/server.md: task tools mounted in an app of your own', () => {
  it.each([
    ['node:http', "from 'node:http'"],
    ['Express', "from 'express'"],
    ['Hono', "from 'hono'"],
  ])(
    'with %s',
    async (name, marker) => {
      const blocks = await serverPageBlocks();
      const shared = blocks.filter((code) => code.includes('export const tasks'));
      const mounts = blocks.filter((code) => code.includes(marker) && code.includes('tasks.start()'));
      expect(shared, 'one shared tasks.ts').toHaveLength(1);
      expect(mounts, `one ${name} mount`).toHaveLength(1);

      const run = join(dir, name.replace(/\W/g, ''));
      await mkdir(run);
      await writeFile(
        join(run, 'tasks.mjs'),
        javascript(replaceOnce(shared[0]!, "'./tasks.db'", JSON.stringify(join(run, 'tasks.db')))),
      );
      const port = await freePort();
      const mount = replaceOnce(mounts[0]!, '3000', String(port));
      await writeFile(join(run, 'app.mjs'), `import { setup, tasks } from './tasks.mjs';\n${javascript(mount)}`);
      const child = spawn(process.execPath, ['app.mjs'], { cwd: run, stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));

      const url = `http://127.0.0.1:${port}/mcp`;
      const client = await connectHttpTaskClient(url, { ledger: join(run, 'ledger.db'), connectLater: true });
      try {
        // the app starts listening after its store opened: the first call may find nobody there yet
        const deadline = Date.now() + 30_000;
        let pong;
        for (;;) {
          try {
            pong = await client.callTool('ping', {});
            break;
          } catch (error) {
            if (Date.now() > deadline || child.exitCode !== null) throw new Error(`${String(error)}\n${stderr}`);
            await new Promise((resolve) => setTimeout(resolve, 200));
          }
        }
        expect(isTaskHandle(pong)).toBe(false);
        expect(pong).toMatchObject({ content: [{ type: 'text', text: 'pong' }] });

        const report = await client.callTool('report', { pages: 2 });
        expect(isTaskHandle(report), 'the task tool answered with a task').toBe(true);
        if (!isTaskHandle(report)) return;
        const outcome = await report.outcome();
        expect(outcome.kind).toBe('completed');
        expect(outcome.kind === 'completed' && outcome.result.content).toEqual([
          { type: 'text', text: 'Wrote 2 pages' },
        ]);
      } finally {
        await client.close();
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
      expect(stderr).toBe('');
    },
    90_000,
  );
});
