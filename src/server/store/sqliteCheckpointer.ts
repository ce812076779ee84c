/**
 * WAL checkpoints off the event loop. SQLite runs its automatic checkpoint inside the commit that crosses the
 * threshold: that commit copies the WAL back into the database file and fsyncs it, so every hundred or so tasks one
 * request of the serving process stalls for milliseconds (≈ 400 µs per task averaged over a create+finish loop on
 * this project's machines). Here the serving connection raises the automatic checkpoint's threshold and a worker thread, with
 * a connection of its own to the same file, runs PASSIVE checkpoints: they copy what no reader still needs and never
 * wait for, nor block, a writer. Commits stay as durable as the connection's `synchronous` setting makes them; only
 * who copies changes.
 *
 * A passive checkpoint from another connection never resets the WAL while writes go on: the writer starts the log
 * over only when every frame has been copied, and under sustained load a new commit always lands first, so the file
 * grew without bound (600 MB in 12 s). Two things bound it now. The serving connection keeps an
 * automatic checkpoint at a high threshold (`restartBytes` of WAL): past it, the writer itself copies the few frames
 * the worker has not, so its next commit starts the log over, and `journal_size_limit` cuts the file back; the
 * stall is what the worker left, not the whole log. And when the worker finds the WAL larger than `restartBytes`
 * (idle after a burst, say) it runs a TRUNCATE checkpoint, which empties the file. That checkpoint never waits: it
 * holds the checkpoint lock from its start, so waiting there for the writer lock (or the readers) would shut the
 * writer out of its own checkpoint at the threshold for as long, and the log would grow by everything written
 * meanwhile (115 MB of a 16 MiB limit in one CI run, with a 2 s wait). Busy, it copies what it can, as a PASSIVE
 * checkpoint does, and the next round tries again.
 *
 * Should the worker fail, the serving connection takes the automatic checkpoint back, so the WAL never grows unbounded.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

import type Database from 'better-sqlite3';

import { WAL_SIZE_LIMIT_BYTES } from '../../shared/sqlite/sqliteFile.js';

/** SQLite's own default threshold, restored when the worker is gone. */
const AUTO_CHECKPOINT_PAGES = 1000;

// A CommonJS script: it runs from this file under vitest (TypeScript) and from dist alike, and loads the driver by
// the absolute path the main thread resolved. As sqliteDriver.ts explains, no driver object may be left to the garbage
// collector: the worker prepares its two statements once (the driver's pragma() would prepare one a round and drop
// it) and keeps them, with the connection, on its global object until the worker's environment ends.
const WORKER_SOURCE = `
const { statSync } = require('node:fs');
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path, { timeout: 0 });
const passive = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const truncate = db.prepare('PRAGMA wal_checkpoint(TRUNCATE)');
globalThis.closeoutCheckpointer = { db, passive, truncate };
const walBytes = () => {
  try {
    return statSync(workerData.path + '-wal').size;
  } catch {
    return 0;
  }
};
const checkpoint = () => {
  try {
    // the connection's busy timeout is 0: neither mode waits for a lock (see the module's comment)
    (walBytes() > workerData.restartBytes ? truncate : passive).get();
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

/**
 * Take checkpoints of `db` (opened on `path`) off its thread, every `everyMs`, truncating the WAL once it is larger
 * than `restartBytes`.
 */
export function startCheckpointer(
  db: Database.Database,
  path: string,
  everyMs = 250,
  restartBytes = WAL_SIZE_LIMIT_BYTES,
): Checkpointer {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: { driver, path, everyMs, restartBytes },
  });
  // the worker must not keep a process alive that is otherwise done
  worker.unref();
  const pageSize = db.pragma('page_size', { simple: true }) as number;
  db.pragma(`wal_autocheckpoint = ${Math.max(1, Math.ceil(restartBytes / pageSize))}`);
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
