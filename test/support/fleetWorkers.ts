/**
 * Fleet worker processes (`test/e2e/fixtures/fleetWorker.mjs`): each a TaskClient on a shared ledger, reporting what it
 * does as one JSON event per line on stdout.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('../e2e/fixtures/fleetWorker.mjs', import.meta.url));

/** One line a fleet worker printed. */
export interface FleetEvent {
  event: string;
  pid: number;
  taskId?: string;
  recordId?: string;
  key?: string;
  correlationId?: string;
  kind?: string;
  localState?: string;
  status?: string;
  code?: string;
  previouslyAsked?: boolean;
  message?: string;
}

/** The workers started so far; `killAll()` SIGKILLs those still running. */
export class FleetWorkers {
  private readonly children: ChildProcess[] = [];

  /** Starts a worker with `config`; its events are appended to `events`, its stderr forwarded with its pid. */
  start(config: Record<string, unknown>, events: FleetEvent[], env: Record<string, string> = {}): ChildProcess {
    const child = spawn(process.execPath, [WORKER, JSON.stringify(config)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    this.children.push(child);
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let newline = buffer.indexOf('\n'); newline >= 0; newline = buffer.indexOf('\n')) {
        events.push(JSON.parse(buffer.slice(0, newline)) as FleetEvent);
        buffer = buffer.slice(newline + 1);
      }
    });
    child.stderr!.on('data', (chunk: Buffer) =>
      process.stderr.write(`[fleet worker ${child.pid}] ${chunk.toString()}`),
    );
    return child;
  }

  killAll(): void {
    for (const child of this.children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}
