/**
 * Real `closeout` processes for end-to-end tests and benchmarks: the built CLI (dist/), spawned with node, resolved
 * through the package (so it is found from test/ and from the benchmarks compiled into dist/bench alike).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

export const CLI = join(dirname(createRequire(import.meta.url).resolve('closeout/package.json')), 'dist/cli/main.js');

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  stderr: () => string;
  /** SIGKILL: no cleanup, no lease release, as a crash. */
  kill(): Promise<void>;
  /** SIGTERM: a graceful stop. */
  stop(): Promise<void>;
}

/**
 * Starts `closeout serve ARGS` (with `env` added to this process's environment) and resolves with its URL. `launch`
 * may wrap the command line (another PID namespace, a parent that never reaps it); `child` is then the wrapper.
 */
export async function startServe(
  args: string[],
  timeoutMs = 15_000,
  env: Record<string, string> = {},
  launch: (argv: string[]) => string[] = (argv) => argv,
): Promise<ServeProcess> {
  return startListening('serve', args, timeoutMs, env, launch);
}

/** Starts `closeout NAME --port 0 ARGS` (serve, console: each prints its URL first) and resolves with that URL. */
export async function startListening(
  name: 'serve' | 'console',
  args: string[],
  timeoutMs: number,
  env: Record<string, string> = {},
  launch: (argv: string[]) => string[] = (argv) => argv,
): Promise<ServeProcess> {
  return startPrinting(
    `closeout ${name}`,
    launch([process.execPath, CLI, name, '--port', '0', ...args]),
    timeoutMs,
    env,
  );
}

/**
 * Starts `argv` (with `env` added to this process's environment), a process that prints its URL (or another first
 * line: a test fixture's port) on stdout first, and resolves with that line as `url`.
 */
export async function startPrinting(
  what: string,
  argv: string[],
  timeoutMs: number,
  env: Record<string, string> = {},
): Promise<ServeProcess> {
  const [command, ...rest] = argv;
  const child = spawn(command!, rest, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let err = '';
  child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} printed nothing in ${timeoutMs} ms: ${err}`));
    }, timeoutMs);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code}: ${err}`));
    });
  });
  const ended = async (signal: NodeJS.Signals) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill(signal);
    await exited;
  };
  return { url, child, stderr: () => err, kill: () => ended('SIGKILL'), stop: () => ended('SIGTERM') };
}
