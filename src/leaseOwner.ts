/**
 * Lease owner ids shared by both halves (server task leases, client ledger leases): `host:pid:nonce`. A lease held
 * by a process of this host that no longer exists need not be waited out: its holder cannot renew it.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

export function newLeaseOwner(): string {
  return `${hostname()}:${process.pid}:${randomBytes(6).toString('base64url')}`;
}

/** True only for an owner of this host whose process is gone (a recycled pid reads as alive: then we wait). */
export function isDeadLocalOwner(owner: string): boolean {
  const [host, pidText] = owner.split(':');
  const pid = Number(pidText);
  if (host !== hostname() || !Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
