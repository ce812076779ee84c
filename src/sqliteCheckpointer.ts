/**
 * WAL checkpoints off the event loop. SQLite runs its automatic checkpoint inside the commit that crosses the
 * threshold: that commit copies the WAL back into the database file and fsyncs it, so every hundred or so tasks one
 * request of the serving process stalls for milliseconds (≈ 400 µs per task averaged over a create+finish loop on
 * this project's machines). Here the serving connection turns the automatic checkpoint off and a worker thread, with
 * a connection of its own to the same file, runs PASSIVE checkpoints: they copy what no reader still needs and never
 * wait for, nor block, a writer. Commits stay as durable as before (WAL, synchronous=NORMAL); only who copies changes.
 *
 * Should the worker fail, the serving connection takes the automatic checkpoint back, so the WAL never grows unbounded.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

import type Database from 'better-sqlite3';

/** SQLite's own default threshold, restored when the worker is gone. */
const AUTO_CHECKPOINT_PAGES = 1000;

// A CommonJS script: it runs from this file under vitest (TypeScript) and from dist alike, and loads the driver by
// the absolute path the main thread resolved.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path, { timeout: 0 });
const checkpoint = () => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch {
    // busy or locked: the next round copies it
  }
};
const timer = setInterval(checkpoint, workerData.everyMs);
parentPort.on('message', () => {
  clearInterval(timer);
  checkpoint();
  db.close();
  parentPort.close();
});
`;

export interface Checkpointer {
  /** Stop the worker after one last checkpoint; resolves once it has closed its connection. */
  stop(): Promise<void>;
}

/** Take checkpoints of `db` (opened on `path`) off its thread, every `everyMs`. */
export function startCheckpointer(db: Database.Database, path: string, everyMs = 250): Checkpointer {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { driver, path, everyMs } });
  // the worker must not keep a process alive that is otherwise done
  worker.unref();
  db.pragma('wal_autocheckpoint = 0');
  let stopping = false;
  const exited = new Promise<void>((resolve) => {
    worker.once('exit', () => {
      if (!stopping && db.open) db.pragma(`wal_autocheckpoint = ${AUTO_CHECKPOINT_PAGES}`);
      resolve();
    });
  });
  // an error ends the worker; the exit handler above hands checkpoints back to the serving connection
  worker.on('error', () => undefined);
  return {
    stop: async () => {
      if (stopping) return exited;
      stopping = true;
      // waiting for the worker must keep the process alive (unref'd, an awaited stop would end it with exit code 13)
      worker.ref();
      worker.postMessage('stop');
      await exited;
      if (db.open) db.pragma(`wal_autocheckpoint = ${AUTO_CHECKPOINT_PAGES}`);
    },
  };
}
