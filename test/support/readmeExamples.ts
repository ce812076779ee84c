/**
 * README.md's examples as a user's project runs them: taken from the README's ```ts blocks, transpiled as written, and
 * run as processes of a project whose node_modules links `closeout` (this repository) and the packages the examples
 * import. Used by test/e2e/readmeExamples.test.ts and test/e2e/readmeFrameworks.test.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import ts from 'typescript';
import { expect } from 'vitest';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The ```ts blocks of README.md that contain `marker`. */
export async function examples(marker: string): Promise<string[]> {
  const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  return [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)]
    .map((match) => match[1]!)
    .filter((code) => code.includes(marker));
}

/** `code` with `from` replaced by `to`, failing when the README no longer writes `from` exactly once. */
export function replaceOnce(code: string, from: string, to: string): string {
  expect(code.split(from).length - 1, `the example writes ${from} once`).toBe(1);
  return code.replace(from, to);
}

/** The example as the JavaScript a user's build would run (types stripped, nothing checked: the run checks). */
export function javascript(code: string): string {
  return ts.transpileModule(code, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
}

export interface Exited {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface Started {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
}

export function start(file: string, cwd: string): Started {
  const child = spawn(process.execPath, [file], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return { child, stdout: () => stdout, stderr: () => stderr };
}

/** Runs `file` in `cwd` to its end (SIGKILLed after `timeoutMs`). */
export async function runToEnd(file: string, cwd: string, timeoutMs = 60_000): Promise<Exited> {
  const run = start(file, cwd);
  const timer = setTimeout(() => run.child.kill('SIGKILL'), timeoutMs);
  const [code, signal] = (await once(run.child, 'close')) as [number | null, NodeJS.Signals | null];
  clearTimeout(timer);
  return { code, signal, stdout: run.stdout(), stderr: run.stderr() };
}

/** A temporary project with `closeout` and `packages` (from this repository's node_modules) in its node_modules. */
export async function userProject(prefix: string, packages: readonly string[]): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await mkdir(join(dir, 'node_modules'));
  await symlink(ROOT, join(dir, 'node_modules', 'closeout'), 'dir');
  for (const name of packages) {
    await mkdir(dirname(join(dir, 'node_modules', name)), { recursive: true });
    await symlink(join(ROOT, 'node_modules', name), join(dir, 'node_modules', name), 'dir');
  }
  return dir;
}

/**
 * README's server example running in `dir` on a free port (the only change: `{ port: 3000 }` becomes `{ port: 0 }`),
 * with the URL it printed.
 */
export async function startReadmeServer(dir: string): Promise<{ server: Started; url: string }> {
  const servers = await examples("from 'closeout/server'");
  expect(servers, 'one server example').toHaveLength(1);
  await writeFile(join(dir, 'server.mjs'), javascript(replaceOnce(servers[0]!, '{ port: 3000 }', '{ port: 0 }')));
  const server = start('server.mjs', dir);
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no URL in 30 s: ${server.stderr()}`)), 30_000);
    server.child.stdout!.on('data', () => {
      const line = server.stdout().split('\n')[0];
      if (server.stdout().includes('\n') && line) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    server.child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the server example exited with ${code}: ${server.stderr()}`));
    });
  });
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
  return { server, url };
}

/** Ends `started` (if it still runs) and removes `dir`. */
export async function cleanUp(started: Started | undefined, dir: string | undefined): Promise<void> {
  const child = started?.child;
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
  if (dir) await rm(dir, { recursive: true, force: true });
}
