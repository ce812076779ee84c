// A lease holder is taken for dead at once only when that is proven (docs/DESIGN.md, rules learned in the field, 1): a
// holder SIGKILLed and reaped, or killed and left a zombie, or whose pid now belongs to another process, is dead; a
// live holder in another PID namespace of the same host name is never taken for dead, nor is an owner written in the
// old `host:pid:nonce` form. Real processes: the built lease owner (dist/), `unshare --pid --fork --mount-proc`.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';

import { afterEach, beforeAll, describe, expect, it } from 'vitest';

import { isDeadLocalHolder } from '../../src/shared/lease/leaseHolder.js';
import { inNewPidNamespace, requirePidNamespaces } from '../support/processWrappers.js';
import { waitFor } from '../support/waitFor.js';

const HOLDER = fileURLToPath(new URL('./fixtures/leaseHolder.mjs', import.meta.url));
const BUILT = fileURLToPath(new URL('../../dist/shared/lease/leaseHolder.js', import.meta.url));

const started: ChildProcess[] = [];

beforeAll(() => {
  if (!existsSync(BUILT)) throw new Error('dist/ is missing: run `npm run build` (npm test does it)');
  requirePidNamespaces();
});

afterEach(() => {
  for (const child of started.splice(0)) child.kill('SIGKILL');
});

/** Starts `argv` and resolves with its first JSON line on stdout. */
async function firstLine<T>(argv: string[]): Promise<{ child: ChildProcess; value: T }> {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const value = await waitFor(
    `a line from ${argv.join(' ')}`,
    () => {
      if (out.includes('\n')) return JSON.parse(out.split('\n')[0]!) as T;
      if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}: ${err}`);
      return undefined;
    },
    20_000,
  );
  return { child, value };
}

const holder = (prefix: string[] = []) =>
  firstLine<{ owner: string; pid: number }>([...prefix, process.execPath, HOLDER, 'hold']);

async function checkFrom(prefix: string[], owners: string[]): Promise<boolean[]> {
  const { value } = await firstLine<{ dead: boolean[] }>([...prefix, process.execPath, HOLDER, 'check', ...owners]);
  return value.dead;
}

const processState = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
};

describe('the fast proof that a lease holder is dead', () => {
  it('a live holder is alive; SIGKILLed and reaped it is dead', async () => {
    const { child, value } = await holder();
    expect(isDeadLocalHolder(value.owner)).toBe(false);
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
    expect(isDeadLocalHolder(value.owner)).toBe(true);
  });

  it('a SIGKILLed holder that its parent has not reaped (a zombie) is dead', async () => {
    // sh starts the holder, then becomes `sleep`, which never reaps it
    const { child: parent, value } = await firstLine<{ owner: string; pid: number }>([
      'sh',
      '-c',
      `"${process.execPath}" "${HOLDER}" hold & exec sleep 120`,
    ]);
    expect(isDeadLocalHolder(value.owner)).toBe(false);
    process.kill(value.pid, 'SIGKILL');
    await waitFor('the holder to be a zombie', () => (processState(value.pid) === 'Z' ? true : undefined));
    // its leader is a zombie as soon as the main thread exits; its other threads (libuv's, V8's) may take a moment
    // more to end on a loaded machine, and until they have, nothing is proven (the proof stays conservative)
    await waitFor('the zombie holder proven dead', () => (isDeadLocalHolder(value.owner) ? true : undefined), 5_000);
    parent.kill('SIGKILL');
  });

  it('a pid the kernel handed to another process is not the holder: the holder is dead, the new process alive', async () => {
    const { value } = await firstLine<{
      firstPid: number;
      secondPid: number;
      whileAlive: boolean;
      afterDeath: boolean;
      afterReuse: boolean;
      reuserAlive: boolean;
    }>(inNewPidNamespace([process.execPath, HOLDER, 'reuse']));
    // precondition: the second holder really got the first one's pid
    expect(value.secondPid).toBe(value.firstPid);
    expect(value).toMatchObject({ whileAlive: false, afterDeath: true, afterReuse: true, reuserAlive: true });
  });

  it('a live holder of the same host name in another PID namespace is never taken for dead, either way', async () => {
    const here = await holder();
    const there = await holder(inNewPidNamespace([]));
    // same host name, and the namespaced holder's pid is small while ours is not present over there
    expect(there.value.owner.startsWith(`${hostname()}:`)).toBe(true);
    expect(await checkFrom(inNewPidNamespace([]), [here.value.owner])).toEqual([false]);
    expect(isDeadLocalHolder(there.value.owner)).toBe(false);
  });

  it('a dead holder of another PID namespace is left to its lease: nothing over there can be proven from here', async () => {
    const { child, value } = await holder();
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
    expect(await checkFrom(inNewPidNamespace([]), [value.owner])).toEqual([false]);
  });

  it('owners without a proof (the old host:pid:nonce form, or foreign) are never taken for dead', async () => {
    const { child, value } = await holder();
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
    const gone = value.pid;
    for (const owner of [
      `${hostname()}:${gone}:AbCdEfGh`,
      `${hostname()}:${gone}`,
      `closeout-doctor:${gone}`,
      'instance-a',
      '',
      `${value.owner}x`,
    ]) {
      expect(isDeadLocalHolder(owner), owner).toBe(false);
    }
  });
});
