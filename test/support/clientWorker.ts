/**
 * The crash tests' client process (test/e2e/fixtures/clientWorker.mjs, or another fixture of its kind) as a child, with
 * its JSON events to wait on.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('../e2e/fixtures/clientWorker.mjs', import.meta.url));

export interface WorkerEvent {
  event: string;
  [key: string]: unknown;
}

export interface ClientWorker {
  child: ChildProcess;
  events: WorkerEvent[];
  stderr: () => string;
  /** The first event of this kind, waited for (bounded); throws when the process ended without it. */
  next(event: string, timeoutMs?: number): Promise<WorkerEvent>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Another client fixture than clientWorker.mjs, speaking the same JSON lines, and where it runs. */
export interface WorkerLaunch {
  fixture?: string;
  /** Its working directory (where a process that aborts may leave a core file). */
  cwd?: string;
}

/** `env` is added to this process's environment (e.g. NODE_OPTIONS to preload the OpenTelemetry SDK). */
export function startClientWorker(
  config: Record<string, unknown>,
  env: Record<string, string> = {},
  launch: WorkerLaunch = {},
): ClientWorker {
  const child = spawn(process.execPath, [launch.fixture ?? WORKER, JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
    ...(launch.cwd === undefined ? {} : { cwd: launch.cwd }),
  });
  const events: WorkerEvent[] = [];
  const waiters: Array<() => void> = [];
  let buffer = '';
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    for (let newline = buffer.indexOf('\n'); newline >= 0; newline = buffer.indexOf('\n')) {
      events.push(JSON.parse(buffer.slice(0, newline)) as WorkerEvent);
      buffer = buffer.slice(newline + 1);
      for (const wake of waiters.splice(0)) wake();
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      for (const wake of waiters.splice(0)) wake();
      resolve({ code, signal });
    }),
  );
  const next = async (event: string, timeoutMs = 20_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = events.find((candidate) => candidate.event === event);
      if (found) return found;
      if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) {
        throw new Error(`worker gave no ${event} event: ${JSON.stringify(events)} ${stderr}`);
      }
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 100);
      });
    }
  };
  return { child, events, stderr: () => stderr, next, exited };
}

/** The scheduler state of a process (`T` stopped, `S` sleeping, `R` running), from /proc. */
export function processState(pid: number): string | undefined {
  try {
    // "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses)
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}
