/**
 * Output whose reader went away (`closeout ls | head -1`, a closed terminal): the write fails with EPIPE, which Node
 * would report as an unhandled error with a stack trace. Here it ends the command quietly instead: what is left to
 * print goes nowhere, and commands that follow tasks let them go, detached, as on Ctrl-C (docs/cli.md, "Exit.mdcodes").
 */

const listeners = new Set<() => void>();
let closed = false;

/** Whether stdout or stderr lost its reader. */
export function outputClosed(): boolean {
  return closed;
}

/** Call `listener` once when stdout or stderr loses its reader (at once if it already has); returns the remover. */
export function onOutputClosed(listener: () => void): () => void {
  if (closed) {
    queueMicrotask(listener);
    return () => undefined;
  }
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Watch both streams; installed once, by the `closeout` entry point. */
export function watchOutput(streams: NodeJS.WriteStream[] = [process.stdout, process.stderr]): void {
  for (const stream of streams) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      // a write after the first failure fails with ERR_STREAM_DESTROYED: the same closed reader
      if (error.code !== 'EPIPE' && error.code !== 'ERR_STREAM_DESTROYED') throw error;
      if (closed) return;
      closed = true;
      for (const listener of [...listeners]) listener();
      listeners.clear();
    });
  }
}
