/**
 * `closeout serve` as a child process for a benchmark: the package's own built CLI, started with node, resolved
 * through the package (so it works wherever the benchmark was compiled to). Ready when it prints its URL.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('dist/cli/main.js', import.meta.resolve('closeout/package.json')));

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  stderr: () => string;
  /** SIGKILL: no cleanup, no lease release, as a crash. */
  kill(): Promise<void>;
  /** SIGTERM: a graceful stop. */
  stop(): Promise<void>;
}

export async function startServe(args: string[], timeoutMs = 30_000): Promise<ServeProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`closeout serve printed no URL in ${timeoutMs} ms: ${err}`));
    }, timeoutMs);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const newline = out.indexOf('\n');
      if (newline > 0) {
        clearTimeout(timer);
        resolve(out.slice(0, newline).trim());
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`closeout serve exited with ${code}: ${err}`));
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
