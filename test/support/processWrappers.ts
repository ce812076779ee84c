/**
 * Command lines that put a process where a lease holder's liveness is hard to tell: in a PID namespace of its own, as
 * in a container that shares this host's name, network and files (`unshare --pid --fork --mount-proc`, util-linux,
 * needs root; the forked child is killed when `unshare` dies), or under a parent that never reaps it.
 */
import { spawnSync } from 'node:child_process';

/** The argv that runs `command` as PID 1 of a fresh PID namespace with its own /proc. */
export function inNewPidNamespace(command: readonly string[]): string[] {
  return ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child', ...command];
}

/** Throws, naming what to do, when this machine cannot make PID namespaces (no unshare, or not root). */
export function requirePidNamespaces(): void {
  const probe = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true'], { encoding: 'utf8' });
  if (probe.status !== 0) {
    throw new Error(
      `these tests need \`unshare --pid --fork --mount-proc\` (util-linux, run as root): ${probe.error?.message ?? probe.stderr.trim()}; see scripts/install-test-tools.sh`,
    );
  }
}

/**
 * The argv that runs `command` under a `sh` that then becomes `sleep` and never reaps it: once killed, `command`
 * stays a zombie until the wrapper is killed. Its pid is written to `pidFile`.
 */
export function underNonReapingParent(command: readonly string[], pidFile: string): string[] {
  return ['sh', '-c', `"$@" & echo $! > '${pidFile}'; exec sleep 600`, 'sh', ...command];
}
