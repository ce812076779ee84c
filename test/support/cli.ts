/** The built `closeout` binary as a child process, for the CLI end-to-end tests: run to the end, or start and steer. */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';

import { CLI } from './processes.js';

export interface CliRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  /** The ledger every command of a test uses (CLOSEOUT_LEDGER, so `--ledger` stays free for tests of the flag). */
  ledger?: string;
  env?: Record<string, string | undefined>;
  timeoutMs?: number;
  /** Wraps the command line (another PID namespace, say); `child` is then the wrapper. */
  launch?: (argv: string[]) => string[];
}

export interface RunningCli {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves when the process has exited. */
  done: Promise<CliRun>;
}

/** Start `closeout ARGS` with stdin not a terminal (so it never prompts) and no colour forced. */
export function startCli(args: string[], options: CliOptions = {}): RunningCli {
  const env: NodeJS.ProcessEnv = { ...process.env, FORCE_COLOR: undefined, NO_COLOR: undefined, CI: undefined };
  if (options.ledger !== undefined) env['CLOSEOUT_LEDGER'] = options.ledger;
  for (const [key, value] of Object.entries(options.env ?? {})) env[key] = value;
  const [command, ...rest] = (options.launch ?? ((argv) => argv))([process.execPath, CLI, ...args]);
  const child = spawn(command!, rest, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timeoutMs = options.timeoutMs ?? 25_000;
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const done = once(child, 'close').then(([code, signal]) => {
    clearTimeout(timer);
    return { code: code as number | null, signal: signal as NodeJS.Signals | null, stdout, stderr };
  });
  return { child, stdout: () => stdout, stderr: () => stderr, done };
}

/** Run `closeout ARGS` to the end. */
export function runCli(args: string[], options: CliOptions = {}): Promise<CliRun> {
  return startCli(args, options).done;
}

/** stdout of a `--json` run, one parsed value per line; throws when any line is not JSON (nothing else may be there). */
export function jsonLines(stdout: string): Record<string, unknown>[] {
  return stdout
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** stdout of a `--json` run that must be exactly one JSON document. */
export function jsonDocument(stdout: string): Record<string, unknown> {
  const lines = jsonLines(stdout);
  if (lines.length !== 1) throw new Error(`expected one JSON document, got ${lines.length} lines: ${stdout}`);
  return lines[0]!;
}
