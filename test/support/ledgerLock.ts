/**
 * Another process holding a SQLite file's write lock (BEGIN IMMEDIATE), as a backup tool, a sqlite3 shell or a large
 * `closeout resume` does: a real second process, so the lock is as the ledger meets it in the field.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface HeldLock {
  child: ChildProcess;
  /** Roll back and let the process end. */
  release(): Promise<void>;
}

/** Resolves once the other process holds the write lock of the SQLite file at `path`. */
export async function holdWriteLock(path: string, timeoutMs = 15_000): Promise<HeldLock> {
  const code = `
    const Database = require('better-sqlite3');
    const db = new Database(${JSON.stringify(path)});
    db.exec('BEGIN IMMEDIATE');
    process.stdout.write('locked\\n');
    process.stdin.on('data', () => undefined);
    process.stdin.on('end', () => { db.exec('ROLLBACK'); db.close(); process.exit(0); });`;
  const child = spawn(process.execPath, ['-e', code], { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no write lock after ${timeoutMs} ms: ${stderr}`)), timeoutMs);
    child.stdout!.once('data', () => {
      clearTimeout(timer);
      resolve();
    });
    child.once('exit', (exitCode) => {
      clearTimeout(timer);
      reject(new Error(`the lock holder exited with ${exitCode}: ${stderr}`));
    });
  });
  const exited = once(child, 'exit');
  return {
    child,
    release: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.stdin!.end();
      await exited;
    },
  };
}
