/**
 * Lease holder ids shared by both halves (server task leases, client ledger leases), and the one fast proof that a
 * holder is dead. docs/DESIGN.md, rules learned in the field, 1: liveness is proven, never guessed. A holder is alive
 * while it renews its lease; the fast path below may say "dead" sooner, and only when the kernel proves it.
 *
 * An id reads `host:pid:nonce:linux/BOOT/PIDNS/TIMENS/START`: the kernel boot (`/proc/sys/kernel/random/boot_id`),
 * the inodes of the holder's PID and time namespaces (`/proc/self/ns/pid`, `/proc/self/ns/time`) and the holder's
 * start time in clock ticks since boot (`/proc/self/stat`, field 22). Where these cannot be read consistently (not
 * Linux, or a /proc that belongs to another PID namespace) the id is `host:pid:nonce`, the form of earlier releases:
 * such a holder, like any id without the proof, is taken for dead only when its lease runs out.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';

/** Who this process is, in the terms the proof compares; undefined when they cannot be read consistently. */
interface ProcessIdentity {
  bootId: string;
  pidNamespace: string;
  timeNamespace: string;
  startTicks: string;
}

const PROOF = /^(.*):(\d+):([\w-]+):linux\/([0-9a-f-]{36})\/(\d+)\/(\d+)\/(\d+)$/;

let self: ProcessIdentity | null | undefined;

export function newLeaseHolder(): string {
  const base = `${hostname()}:${process.pid}:${randomBytes(6).toString('base64url')}`;
  const me = ownIdentity();
  return me ? `${base}:linux/${me.bootId}/${me.pidNamespace}/${me.timeNamespace}/${me.startTicks}` : base;
}

/**
 * True only when `holder`'s process is proven gone: it names this boot and this process's own PID and time
 * namespaces, and its pid is free, or is a zombie (killed, not yet reaped), or belongs to a process started at
 * another time (the pid was reused). Anything else (another namespace or host, an id without the proof, a /proc
 * that hides the process) is false: the caller waits for the holder's lease to run out.
 */
export function isDeadLocalHolder(holder: string): boolean {
  const match = PROOF.exec(holder);
  const me = ownIdentity();
  if (!match || !me) return false;
  const [, , pidText, , bootId, pidNamespace, timeNamespace, startTicks] = match;
  // same boot and same namespace inodes: the holder's namespace is ours, or it was freed (then the holder is gone)
  if (bootId !== me.bootId || pidNamespace !== me.pidNamespace || timeNamespace !== me.timeNamespace) return false;
  const pid = Number(pidText);
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  return processGone(pid, startTicks!);
}

/** `pid` of our own namespace is not the process that started at `startTicks`, or that process is a zombie. */
function processGone(pid: number, startTicks: string): boolean {
  if (!pidInUse(pid)) return true;
  const stat = readStat(pid);
  // hidden by /proc's hidepid, or unreadable: it may be the holder, so nothing is proven
  if (!stat) return !pidInUse(pid);
  if (stat.startTicks !== startTicks) return true;
  if (!isExited(stat.state)) return false;
  // a zombie thread-group leader is dead once no other thread of it can run again: each is gone, a zombie too, or
  // has SIGKILL pending (the kernel kills every thread on SIGKILL or exit_group; none returns to user code)
  let threads: string[];
  try {
    threads = readdirSync(`/proc/${pid}/task`);
  } catch {
    return !pidInUse(pid);
  }
  return threads.every((tid) => tid === String(pid) || threadEnding(pid, tid));
}

const isExited = (state: string) => state === 'Z' || state === 'X';

/** SIGKILL, bit 9 of the pending-signal masks in `/proc/PID/task/TID/status` (proc(5)). */
const SIGKILL_BIT = 1n << 8n;

function threadEnding(pid: number, tid: string): boolean {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT';
  }
  const state = /^State:\s*(\S)/m.exec(status)?.[1];
  if (state !== undefined && isExited(state)) return true;
  const pending = [/^SigPnd:\s*([0-9a-f]+)$/m, /^ShdPnd:\s*([0-9a-f]+)$/m].map((field) => field.exec(status)?.[1]);
  return pending.some((mask) => mask !== undefined && (BigInt(`0x${mask}`) & SIGKILL_BIT) !== 0n);
}

/** Whether `pid` names a process (or thread) of this PID namespace, zombies included. */
function pidInUse(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** State and start time from `/proc/PID/stat` (the command name, field 2, may hold spaces and parentheses). */
function readStat(pid: number | 'self'): { state: string; startTicks: string } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // fields from 3 on: state is field 3, starttime field 22 (proc(5))
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  const startTicks = fields[19];
  if (!state || !startTicks || !/^\d+$/.test(startTicks)) return undefined;
  return { state, startTicks };
}

function ownIdentity(): ProcessIdentity | undefined {
  if (self === undefined) self = readOwnIdentity() ?? null;
  return self ?? undefined;
}

function readOwnIdentity(): ProcessIdentity | undefined {
  if (process.platform !== 'linux') return undefined;
  try {
    const bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const pidNamespace = /^pid:\[(\d+)\]$/.exec(readlinkSync('/proc/self/ns/pid'))?.[1];
    const timeNamespace = readTimeNamespace();
    // /proc must be our PID namespace's own: NSpid lists one pid per namespace from /proc's down to ours
    const nsPid = /^NSpid:\s*(.*)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]?.trim().split(/\s+/);
    const stat = readStat('self');
    if (!/^[0-9a-f-]{36}$/.test(bootId) || !pidNamespace || timeNamespace === undefined || !stat) return undefined;
    if (nsPid?.length !== 1 || nsPid[0] !== String(process.pid)) return undefined;
    return { bootId, pidNamespace, timeNamespace, startTicks: stat.startTicks };
  } catch {
    return undefined;
  }
}

/** The time namespace's inode; '0' on kernels without time namespaces (before 5.6), where every process shares one. */
function readTimeNamespace(): string | undefined {
  try {
    return /^time:\[(\d+)\]$/.exec(readlinkSync('/proc/self/ns/time'))?.[1];
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? '0' : undefined;
  }
}
