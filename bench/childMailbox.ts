/**
 * The messages a benchmark's child process sends over IPC, taken by type in the order they came: `next(type)`
 * resolves with the first unread message of that type, waiting for it if none came yet, and rejects once the child
 * has exited without sending it.
 */
import type { ChildProcess } from 'node:child_process';

export function childMailbox<M extends { type: string }>(
  child: ChildProcess,
  name: string,
): <T extends M['type']>(type: T) => Promise<Extract<M, { type: T }>> {
  const received: M[] = [];
  const waiting: { type: string; resolve: (message: M) => void; reject: (e: Error) => void }[] = [];
  child.on('message', (message: M) => {
    const at = waiting.findIndex((w) => w.type === message.type);
    if (at >= 0) waiting.splice(at, 1)[0]!.resolve(message);
    else received.push(message);
  });
  child.once('exit', (code, signal) => {
    for (const w of waiting.splice(0))
      w.reject(new Error(`${name} client exited (${signal ?? code}) before ${w.type}`));
  });
  return (type) =>
    new Promise((resolve, reject) => {
      const at = received.findIndex((m) => m.type === type);
      if (at >= 0) return resolve(received.splice(at, 1)[0] as never);
      if (child.exitCode !== null || child.signalCode !== null) {
        return reject(new Error(`${name} client exited before ${type}`));
      }
      waiting.push({ type, resolve: resolve as never, reject });
    });
}
