// A holder cut off from the store alone stops its own runs before anyone else may start them (docs/DESIGN.md, "Rules
// learned in the field", 13): instance A alone loses its store while instance B reaches it, so B takes A's tasks once
// their leases lapse. A's handlers (which write a line every 100 ms) must have stopped, their signal aborted with
// 'lease-unrenewed', before B re-runs the resumable task or fails the non-resumable one as interrupted: a side effect
// never runs in two places. The log is written by both processes with O_APPEND, so its line order is the real order.
// PostgreSQL: A reaches the database through a TCP proxy of its own, which the test SIGSTOPs. SQLite: a write lock
// cannot be held against one process only, so A's own writes to the file fail instead (strace injects EIO into its
// pwrite64 and fsync on the store's files), as a failing mount or device seen by one process would.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startPrinting } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { settled } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

const SERVER = fileURLToPath(new URL('./fixtures/tickServer.mjs', import.meta.url));
const PROXY = fileURLToPath(new URL('./fixtures/tcpProxy.mjs', import.meta.url));
const LEASE_MS = 2000;
const dir = realpathSync(mkdtempSync(join(tmpdir(), 'closeout-self-fence-')));
const live: ChildProcess[] = [];
let logs = 0;

afterEach(() => {
  for (const child of live.splice(0)) {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Instance {
  url: string;
  pid: number;
}

/** A fixture process of the test's, stopped with the others after each test (SIGCONT first: it may be stopped). */
async function fixture(what: string, args: string[], env: Record<string, string> = {}): Promise<ServeProcess> {
  const started = await startPrinting(what, [process.execPath, ...args], 20_000, env);
  live.push(started.child);
  return started;
}

async function instance(store: string, tickLog: string): Promise<Instance> {
  const { url, child } = await fixture('the tick server', [SERVER, store, String(LEASE_MS)], { TICK_LOG: tickLog });
  return { url, pid: child.pid! };
}

interface Line {
  event: 'start' | 'tick' | 'aborted' | 'activity';
  taskId: string;
  pid: number;
  at: number;
  attempt?: number;
  cause?: string;
  type?: string;
  outcome?: string;
  /** Its place in the log. */
  index: number;
}

function lines(tickLog: string): Line[] {
  if (!existsSync(tickLog)) return [];
  return readFileSync(tickLog, 'utf8')
    .trim()
    .split('\n')
    .map((line, index) => ({ ...(JSON.parse(line) as Omit<Line, 'index'>), index }));
}

async function create(url: string, name: string, ms: number): Promise<string> {
  const r = await rpc(url, 'tools/call', { name, arguments: { ms } });
  expect(r.result?.['resultType']).toBe('task');
  return r.result!['taskId'] as string;
}

/**
 * A runs a resumable and a non-resumable task; once B has seen its store answer for more than a lease (its takeover
 * gate is open), `cut` cuts A alone off the store, and the test waits for B to take both tasks. Resolves with the log
 * at that moment, B's first line of each task (its run's start; its takeover of the other), and `restore`.
 */
async function cutOffWhileRunning(
  storeOfA: string,
  storeOfB: string,
  cut: (a: Instance) => Promise<() => Promise<void>>,
): Promise<void> {
  const tickLog = join(dir, `ticks-${++logs}.jsonl`);
  const b = await instance(storeOfB, tickLog);
  const a = await instance(storeOfA, tickLog);
  const resumable = await create(a.url, 'tick_resumable', 6000);
  const once = await create(a.url, 'tick_once', 60_000);
  await waitFor('both handlers to start on A', () => {
    const started = lines(tickLog).filter((l) => l.event === 'start' && l.pid === a.pid);
    return started.length === 2 ? true : undefined;
  });
  // B's gate opens a lease after its first answer; A's handlers tick meanwhile
  await sleep(LEASE_MS * 1.25);
  const restore = await cut(a);

  const takenBy = (log: Line[], taskId: string) =>
    log.find((l) => l.taskId === taskId && l.pid === b.pid && (l.event === 'start' || l.type === 'taken-over'));
  const log = await waitFor(
    'B to take both tasks over',
    () => {
      const now = lines(tickLog);
      return takenBy(now, resumable) && takenBy(now, once) ? now : undefined;
    },
    30_000,
    50,
  );
  // time for A's handlers to show they still run, if they do
  await sleep(500);
  const after = lines(tickLog);

  for (const taskId of [resumable, once]) {
    const taken = takenBy(log, taskId)!;
    const ofA = after.filter((l) => l.taskId === taskId && l.pid === a.pid);
    const aborted = ofA.find((l) => l.event === 'aborted');
    const report = {
      taskId,
      takenAt: taken.at,
      lastTickOfA: ofA.filter((l) => l.event === 'tick').at(-1)?.at,
      abortedAt: aborted?.at,
    };
    // A's handler stopped, told why, before B took the task: no tick of A's after B's first line, nor after its abort
    expect(aborted, JSON.stringify(report)).toMatchObject({ cause: 'lease-unrenewed' });
    expect(aborted!.index, JSON.stringify(report)).toBeLessThan(taken.index);
    expect(ofA.filter((l) => l.event === 'tick' && l.index > aborted!.index)).toEqual([]);
    // and A said so in its activity
    const stopped = after.find((l) => l.pid === a.pid && l.taskId === taskId && l.type === 'lease-unrenewed');
    expect(stopped, JSON.stringify(report)).toBeDefined();
    expect(stopped!.index).toBeLessThan(taken.index);
  }
  expect(takenBy(log, resumable)).toMatchObject({ event: 'start', attempt: 2 });
  expect(takenBy(log, once)).toMatchObject({ type: 'taken-over', outcome: 'interrupted' });

  // A comes back: its late writes lose to B's fence, and its handlers stay stopped
  await restore();
  expect(await settled(b.url, resumable, 30_000)).toMatchObject({
    status: 'completed',
    result: { structuredContent: { attempt: 2 } },
  });
  expect(await settled(a.url, once, 30_000)).toMatchObject({
    status: 'failed',
    error: { message: expect.stringContaining('interrupted') },
  });
  await sleep(500);
  const last = lines(tickLog);
  const ticksOfA = (log: Line[]) => log.filter((l) => l.pid === a.pid && l.event === 'tick').length;
  expect(ticksOfA(last)).toBe(ticksOfA(after));
}

describe('PostgreSQL: one instance cut off from the database', { timeout: 120_000 }, () => {
  let postgres: StartedPostgres;
  beforeAll(async () => {
    postgres = await startPostgres();
  }, 120_000);
  afterAll(async () => {
    for (const child of live.splice(0)) child.kill('SIGKILL');
    await postgres?.stop();
  }, 60_000);

  it('stops its runs before the other instance re-runs or fails them', async () => {
    const { connectionString } = await postgres.createDatabase();
    const target = new URL(connectionString);
    const { child: proxy, url: port } = await fixture('the TCP proxy', [PROXY, target.hostname, target.port]);
    const viaProxy = new URL(connectionString);
    viaProxy.port = port;
    await cutOffWhileRunning(viaProxy.toString(), connectionString, async () => {
      // A's statements hang in the stopped proxy: no error, no answer, as behind a dead network path
      proxy.kill('SIGSTOP');
      return async () => void proxy.kill('SIGCONT');
    });
  });
});

describe('SQLite: one instance whose writes to the file fail', { timeout: 120_000 }, () => {
  beforeAll(() => requireStraceInjection());

  it('stops its runs before the other instance re-runs or fails them', async () => {
    const store = join(dir, `store-${++logs}.db`);
    await cutOffWhileRunning(store, store, async (a) => {
      const strace = spawn(
        'strace',
        [
          ...['-f', '-p', String(a.pid), '-o', '/dev/null'],
          ...['-P', store, '-P', `${store}-wal`, '-P', `${store}-shm`],
          ...['-e', 'trace=pwrite64,fsync,fdatasync,ftruncate'],
          ...['-e', 'inject=pwrite64,fsync,fdatasync,ftruncate:error=EIO'],
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      live.push(strace);
      let err = '';
      strace.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
      await waitFor('strace to attach to A', () => (/attached/.test(err) ? true : undefined));
      return async () => {
        const exited = once(strace, 'exit');
        // SIGINT: strace detaches and A's system calls run as before
        strace.kill('SIGINT');
        await exited;
      };
    });
  });
});

/** Throws, naming what to do, when this machine cannot inject faults into another process's system calls. */
function requireStraceInjection(): void {
  const probe = spawnSync('strace', ['-f', '-o', '/dev/null', '-e', 'inject=getpid:error=EIO', 'true'], {
    encoding: 'utf8',
  });
  if (probe.error || probe.status !== 0) {
    throw new Error(
      `these tests need strace with fault injection (strace 4.16 or later) and the right to trace processes (root, or CAP_SYS_PTRACE): ${probe.error?.message ?? probe.stderr}`,
    );
  }
}
