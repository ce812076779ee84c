// A `closeout serve` starting on a SQLite store that another instance holds tasks in takes them over at start only
// when their holder is proven dead (docs/DESIGN.md, rules learned in the field, 1): a live instance of the same host
// name in another PID namespace keeps its tasks (none re-run, none failed as interrupted), while an instance SIGKILLed
// and left a zombie by a parent that does not reap it, or whose pid the kernel handed to another process, is taken over
// at once, long before its lease would run out.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { type ServeProcess, startServe } from '../support/processes.js';
import { inNewPidNamespace, requirePidNamespaces, underNonReapingParent } from '../support/processWrappers.js';
import { rpc } from '../support/rpc.js';
import { runsOf, settled } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-server-takeover-'));
const runLog = join(dir, 'runs.jsonl');
const live: ServeProcess[] = [];
const labs: ChildProcess[] = [];
const HOLDER = fileURLToPath(new URL('./fixtures/leaseHolder.mjs', import.meta.url));
let stores = 0;

beforeAll(() => requirePidNamespaces());

afterEach(async () => {
  await Promise.all(live.splice(0).map((p) => p.kill()));
  for (const lab of labs.splice(0)) lab.kill('SIGKILL');
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function serve(store: string, leaseMs: number, launch?: (argv: string[]) => string[]): Promise<ServeProcess> {
  const p = await startServe(
    ['--store', store, '--lease-ms', String(leaseMs)],
    20_000,
    { CLOSEOUT_RUN_LOG: runLog },
    launch,
  );
  live.push(p);
  return p;
}

async function create(url: string, name: string, args: Record<string, unknown>): Promise<string> {
  const r = await rpc(url, 'tools/call', { name, arguments: args });
  expect(r.result?.['resultType']).toBe('task');
  return r.result!['taskId'] as string;
}

const processState = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
};

describe('start-up takeover on a shared SQLite store', { timeout: 90_000 }, () => {
  it('leaves alone the tasks of a live instance of the same host name in another PID namespace', async () => {
    const store = join(dir, `store-${++stores}.db`);
    const host = await serve(store, 2000);
    const batch = await create(host.url, 'batch_job', { items: 16, stepMs: 250 });
    const report = await create(host.url, 'export_report', { pages: 16, pageMs: 250 });
    await waitFor('both handlers to start', () =>
      runsOf(runLog, batch).length && runsOf(runLog, report).length ? true : undefined,
    );

    // a second instance in a container-like PID namespace: the host instance's pid does not exist over there
    const contained = await serve(store, 2000, inNewPidNamespace);

    const reportTask = await settled(contained.url, report, 30_000);
    expect(reportTask).toMatchObject({ status: 'completed' });
    const batchTask = await settled(contained.url, batch, 30_000);
    expect(batchTask).toMatchObject({
      status: 'completed',
      result: { structuredContent: { processed: 16, attempt: 1 } },
    });
    // each handler ran once, in the instance that created it
    expect(runsOf(runLog, batch)).toEqual([expect.objectContaining({ attempt: 1, pid: host.child.pid })]);
    expect(runsOf(runLog, report)).toEqual([expect.objectContaining({ attempt: 1, pid: host.child.pid })]);
  });

  it('takes over at once the tasks of an instance SIGKILLed and not yet reaped (a zombie)', async () => {
    const store = join(dir, `store-${++stores}.db`);
    const pidFile = join(dir, `zombie-${stores}.pid`);
    // leases of a minute: a takeover within seconds can only come from the proof that the holder is dead
    const first = await serve(store, 60_000, (argv) => underNonReapingParent(argv, pidFile));
    const batch = await create(first.url, 'batch_job', { items: 8, stepMs: 250 });
    const report = await create(first.url, 'export_report', { pages: 200, pageMs: 250 });
    await waitFor('both handlers to start', () =>
      runsOf(runLog, batch).length && runsOf(runLog, report).length ? true : undefined,
    );

    const pid = Number(readFileSync(pidFile, 'utf8'));
    process.kill(pid, 'SIGKILL');
    await waitFor('the killed instance to be a zombie', () => (processState(pid) === 'Z' ? true : undefined));

    const second = await serve(store, 60_000);
    const reportTask = await settled(second.url, report, 20_000);
    expect(reportTask).toMatchObject({ status: 'failed', error: { code: -32603 } });
    expect(String((reportTask['error'] as { message: string }).message)).toMatch(/interrupted by a server restart/);
    const batchTask = await settled(second.url, batch, 20_000);
    expect(batchTask).toMatchObject({
      status: 'completed',
      result: { structuredContent: { processed: 8, attempt: 2 } },
    });
    // the zombie is still there: it was taken for dead while its pid still existed
    expect(processState(pid)).toBe('Z');
  });

  it('takes over at once the tasks of a killed instance whose pid now belongs to another process', async () => {
    const store = join(dir, `store-${++stores}.db`);
    // a namespace of its own, where the kernel can be made to hand the dead instance's pid to a `sleep`
    const argv = inNewPidNamespace([process.execPath, HOLDER, 'serve-reuse', '--store', store, '--lease-ms', '60000']);
    const lab = spawn(argv[0]!, argv.slice(1), {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { ...process.env, CLOSEOUT_RUN_LOG: runLog },
    });
    labs.push(lab);
    let out = '';
    lab.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const line = <T>(key: string) =>
      waitFor(
        `the lab's ${key} line`,
        () => {
          const found = out
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l) as Record<string, unknown>)
            .find((l) => key in l);
          return found as T | undefined;
        },
        30_000,
      );

    const { first } = await line<{ first: string }>('first');
    const report = await create(first, 'export_report', { pages: 200, pageMs: 250 });
    await waitFor('the handler to start', () => (runsOf(runLog, report).length ? true : undefined));
    lab.stdin!.write('kill\n');
    const reused = await line<{ second: string; firstPid: number; reuserPid: number }>('second');
    // precondition: the pid of the dead instance is in use by another process
    expect(reused.reuserPid).toBe(reused.firstPid);

    const reportTask = await settled(reused.second, report, 20_000);
    expect(reportTask).toMatchObject({ status: 'failed', error: { code: -32603 } });
    expect(String((reportTask['error'] as { message: string }).message)).toMatch(/interrupted by a server restart/);
  });
});
