/**
 * A lease holder id the kernel proves dead (src/shared/lease/leaseHolder.ts): this process's identity with the pid of a child that
 * has exited and been reaped. Records left by such a holder are taken over at once; a holder named any other way is
 * taken over only once the taker's takeover gate opens (src/shared/lease/takeoverGate.ts), a lease after it first reached the store.
 */
import { spawnSync } from 'node:child_process';

import { newLeaseHolder } from '../../src/shared/lease/leaseHolder.js';

export function deadHolderId(): string {
  const { pid } = spawnSync('true');
  if (pid === undefined || pid <= 0) throw new Error('could not start a process to name a dead holder after');
  const [host, , ...rest] = newLeaseHolder().split(':');
  return [host, String(pid), ...rest].join(':');
}
