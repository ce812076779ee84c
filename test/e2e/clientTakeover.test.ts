// One liveness rule for every client path that takes a ledger record over (docs/DESIGN.md, rules learned in the field,
// 1): `resume` (all, or one TASK_ID), `answer`, `call --idempotency-key` and `attach()` take a record held
// by a proven-dead holder at once (SIGKILLed, or a zombie nobody reaped), and respect a live holder, also one of the
// same host name in another PID namespace sharing the ledger file. The holders' leases last five minutes: a takeover
// within seconds comes only from the proof. A holder the kernel cannot prove dead (another PID namespace) whose lease
// ran out is waited for until the command's takeover gate opens (rule 11), then taken over unless it renewed.
// Real processes: a built client worker, the built CLI, `closeout serve`.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { connectHttpTaskClient, SqliteLedger, type TaskRecord } from '../../src/client/index.js';
import { type CliOptions, jsonDocument, jsonLines, runCli, startCli } from '../support/cli.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { inNewPidNamespace, requirePidNamespaces, underNonReapingParent } from '../support/processWrappers.js';
import { waitFor } from '../support/waitFor.js';

const WORKER = fileURLToPath(new URL('./fixtures/clientWorker.mjs', import.meta.url));
/** The holders' lease: far longer than any test here, so only the proof can free it early. */
const LEASE_MS = 300_000;
/** Generous bounds for a loaded machine. */
const PATIENCE_MS = 60_000;

const dir = mkdtempSync(join(tmpdir(), 'closeout-client-takeover-'));
let server: ServeProcess;
let ledgers = 0;
const started: ChildProcess[] = [];

beforeAll(async () => {
  requirePidNamespaces();
  server = await startServe(['--store', join(dir, 'server.db')]);
});

afterEach(() => {
  for (const child of started.splice(0)) child.kill('SIGKILL');
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Holder {
  child: ChildProcess;
  /** The worker's own pid (not its wrapper's). */
  pid: () => number;
  events: () => Array<Record<string, unknown>>;
}

/** A client worker (the built library) that calls `tool` and follows its task, holding the record's lease. */
function startHolder(
  ledger: string,
  config: Record<string, unknown>,
  launch: (argv: string[]) => string[] = (argv) => argv,
  pidFile?: string,
): Holder {
  const [command, ...rest] = launch([
    process.execPath,
    WORKER,
    JSON.stringify({ url: server.url, ledger, askedLog: join(dir, 'asked.log'), leaseMs: LEASE_MS, ...config }),
  ]);
  const child = spawn(command!, rest, { stdio: ['ignore', 'pipe', 'inherit'] });
  started.push(child);
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return {
    child,
    pid: () => (pidFile ? Number(readFileSync(pidFile, 'utf8')) : child.pid!),
    events: () => jsonLines(out.slice(0, out.lastIndexOf('\n') + 1)),
  };
}

/** The one record of a ledger, once `ready` says it is as the test needs it. */
async function recordOf(ledger: string, ready: (record: TaskRecord) => boolean): Promise<TaskRecord> {
  return waitFor(
    'the holder’s record',
    async () => {
      const opened = new SqliteLedger(ledger);
      try {
        const [record] = await opened.list();
        return record && ready(record) ? record : undefined;
      } finally {
        await opened.dispose();
      }
    },
    PATIENCE_MS,
    100,
  );
}

const processState = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
};

/** A holder that SIGKILLs itself right after its task is committed, before it ever polls: the lease stays its own. */
async function deadHolder(
  tool: string,
  args: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Promise<{ ledger: string; record: TaskRecord }> {
  const ledger = join(dir, `ledger-${++ledgers}.db`);
  const holder = startHolder(ledger, {
    mode: 'call',
    tool,
    args,
    killAt: { method: 'tasks/get', when: 'before' },
    ...extra,
  });
  await waitFor(
    'the holder to die',
    () => (holder.child.exitCode !== null || holder.child.signalCode ? true : undefined),
    PATIENCE_MS,
  );
  const record = await recordOf(ledger, (r) => r.taskId !== undefined);
  expect(record).toMatchObject({ localState: 'tracking' });
  expect(record.leaseExpiresAt! - Date.now()).toBeGreaterThan(LEASE_MS / 2);
  return { ledger, record };
}

/** A live holder renewing a 2 s lease on a task that outlasts the test (400 × 250 ms), and its record with the task. */
async function renewingHolder(ledger: string): Promise<{ holder: Holder; record: TaskRecord }> {
  const holder = startHolder(ledger, {
    mode: 'call',
    tool: 'batch_job',
    args: { items: 400, stepMs: 250 },
    leaseMs: 2_000,
  });
  return { holder, record: await recordOf(ledger, (r) => r.taskId !== undefined) };
}

/** The holder still holds the record's lease, and its task runs on. */
async function stillHeldBy(ledger: string, holder: Holder, owner: string): Promise<void> {
  const record = await recordOf(ledger, () => true);
  expect(record).toMatchObject({ localState: 'tracking', leaseHolder: owner });
  expect(holder.child.exitCode).toBeNull();
  expect(holder.events().find((e) => e['event'] === 'error')).toBeUndefined();
}

const cli = (args: string[], options: CliOptions) => runCli(args, { timeoutMs: PATIENCE_MS, ...options });

const FOLLOWED_ELSEWHERE = /another closeout process follows/;

describe('taking a record over from a dead holder, at once, on every path', { timeout: 4 * PATIENCE_MS }, () => {
  it('resume TASK_ID follows the task of a SIGKILLed holder to its close-out', async () => {
    const { ledger, record } = await deadHolder('batch_job', { items: 3, stepMs: 200 });
    const run = await cli(['resume', record.taskId!, '--json'], { ledger });
    expect(run.stderr).not.toMatch(FOLLOWED_ELSEWHERE);
    expect(run.code).toBe(0);
    const events = jsonLines(run.stdout);
    expect(events.find((e) => e['event'] === 'resumed')).toMatchObject({ taskId: record.taskId });
    expect(events.at(-1)).toMatchObject({ event: 'closeout', taskId: record.taskId, outcome: 'completed' });
  });

  it('answer answers the input of a task whose holder was SIGKILLed', async () => {
    const { ledger, record } = await deadHolder('approve_deploy', { env: 'qa', deployMs: 100 });
    const run = await cli(['answer', record.taskId!, '--accept', '{"approve":true,"note":"taken over"}', '--json'], {
      ledger,
    });
    expect(run.stderr).not.toMatch(FOLLOWED_ELSEWHERE);
    expect(run.code).toBe(0);
    expect(jsonDocument(run.stdout)).toMatchObject({
      taskId: record.taskId,
      answered: [{ key: 'approval', action: 'accept', sent: true }],
    });
  });

  it('call --idempotency-key gives the same task, followed to its close-out, when its holder was SIGKILLed', async () => {
    const args = { items: 3, stepMs: 200 };
    const { ledger, record } = await deadHolder('batch_job', args, { idempotencyKey: 'nightly-dead' });
    const run = await cli(
      ['call', server.url, 'batch_job', '--args', JSON.stringify(args), '--idempotency-key', 'nightly-dead', '--json'],
      { ledger },
    );
    expect(run.stderr).not.toMatch(FOLLOWED_ELSEWHERE);
    expect(run.code).toBe(0);
    expect(jsonLines(run.stdout).at(-1)).toMatchObject({
      event: 'closeout',
      taskId: record.taskId,
      outcome: 'completed',
    });
  });

  it('call --idempotency-key settles a submission whose holder died before the answer, as resume does', async () => {
    const ledger = join(dir, `ledger-${++ledgers}.db`);
    const args = { items: 2, stepMs: 100 };
    const holder = startHolder(ledger, {
      mode: 'call',
      tool: 'batch_job',
      args,
      idempotencyKey: 'sent-then-dead',
      killAt: { method: 'tools/call', when: 'after' },
    });
    await waitFor(
      'the holder to die',
      () => (holder.child.exitCode !== null || holder.child.signalCode ? true : undefined),
      PATIENCE_MS,
    );
    const before = await recordOf(ledger, () => true);
    expect(before).toMatchObject({ localState: 'submitting' });
    const run = await cli(
      [
        'call',
        server.url,
        'batch_job',
        '--args',
        JSON.stringify(args),
        '--idempotency-key',
        'sent-then-dead',
        '--json',
      ],
      { ledger },
    );
    // not "being submitted by" a process that is gone: the submission is settled now, not in a minute
    expect(run.stderr).not.toMatch(/is being submitted by/);
    expect((await recordOf(ledger, () => true)).localState).not.toBe('submitting');
  });

  it('attach() follows the task of a SIGKILLed holder', async () => {
    const { ledger, record } = await deadHolder('batch_job', { items: 3, stepMs: 200 });
    const client = await connectHttpTaskClient(server.url, { ledger });
    try {
      const handle = await client.attach(record.taskId!);
      expect(await handle.outcome()).toMatchObject({ kind: 'completed' });
    } finally {
      await client.close();
    }
  });

  it('resume takes over at once from a holder SIGKILLed and left a zombie by its parent', async () => {
    const ledger = join(dir, `ledger-${++ledgers}.db`);
    const pidFile = join(dir, `holder-${ledgers}.pid`);
    const holder = startHolder(
      ledger,
      {
        mode: 'call',
        tool: 'batch_job',
        args: { items: 3, stepMs: 200 },
        killAt: { method: 'tasks/get', when: 'before' },
      },
      (argv) => underNonReapingParent(argv, pidFile),
      pidFile,
    );
    const record = await recordOf(ledger, (r) => r.taskId !== undefined);
    await waitFor(
      'the holder to be a zombie',
      () => (processState(holder.pid()) === 'Z' ? true : undefined),
      PATIENCE_MS,
    );
    const run = await cli(['resume', '--json'], { ledger });
    expect(run.code).toBe(0);
    const events = jsonLines(run.stdout);
    expect(events.find((e) => e['event'] === 'elsewhere')).toBeUndefined();
    expect(events.find((e) => e['event'] === 'resumed')).toMatchObject({ taskId: record.taskId });
    expect(events.at(-1)).toMatchObject({ event: 'closeout', taskId: record.taskId, outcome: 'completed' });
    expect(processState(holder.pid())).toBe('Z');
  });
});

describe('a live holder keeps its records', { timeout: 4 * PATIENCE_MS }, () => {
  // tasks long enough to outlast the commands on a loaded machine; the holders are killed after the test

  it('resume TASK_ID and call --idempotency-key leave a live holder’s task to it', async () => {
    const ledger = join(dir, `ledger-${++ledgers}.db`);
    const args = { items: 400, stepMs: 250 };
    const holder = startHolder(ledger, { mode: 'call', tool: 'batch_job', args, idempotencyKey: 'live-one' });
    const record = await recordOf(ledger, (r) => r.taskId !== undefined);
    const resumed = await cli(['resume', record.taskId!, '--json'], { ledger });
    expect(resumed.code).not.toBe(0);
    expect(resumed.stderr).toMatch(FOLLOWED_ELSEWHERE);
    const called = await cli(
      ['call', server.url, 'batch_job', '--args', JSON.stringify(args), '--idempotency-key', 'live-one', '--json'],
      { ledger },
    );
    expect(called.code).not.toBe(0);
    expect(called.stderr).toMatch(FOLLOWED_ELSEWHERE);
    await stillHeldBy(ledger, holder, record.leaseHolder!);
  });

  it('resume in another PID namespace on the same ledger leaves a live holder of the same host name alone', async () => {
    const ledger = join(dir, `ledger-${++ledgers}.db`);
    const { holder, record } = await renewingHolder(ledger);
    // over there the holder's pid does not exist: only the proof keeps it from being taken for dead
    const run = await cli(['resume', '--json'], { ledger, launch: inNewPidNamespace });
    const events = jsonLines(run.stdout);
    expect(events.find((e) => e['event'] === 'resumed')).toBeUndefined();
    expect(events.find((e) => e['event'] === 'elsewhere')).toMatchObject({ taskId: record.taskId });
    await stillHeldBy(ledger, holder, record.leaseHolder!);
  });
});

describe('a holder the kernel cannot prove dead, once this process may tell', { timeout: 4 * PATIENCE_MS }, () => {
  // every CLI run is a process just started, whose takeover gate opens a client lease (30 s) and a third after its
  // start: a lapsed lease is waited for that long, and taken then only if its holder did not renew meanwhile
  const CLI_LEASE_MS = 30_000;
  const WAITING = /is held by .*, whose lease ran out .* ago; waiting up to .* for it to renew before taking it over/;

  it('resume takes over the task of a holder SIGKILLed in another PID namespace after the gate, and closes it out', async () => {
    const ledger = join(dir, `ledger-${++ledgers}.db`);
    const holder = startHolder(
      ledger,
      { mode: 'call', tool: 'batch_job', args: { items: 20, stepMs: 250 }, leaseMs: 2_000 },
      inNewPidNamespace,
    );
    const record = await recordOf(ledger, (r) => r.taskId !== undefined);
    // unshare dies, and its child with it: a holder this PID namespace cannot prove dead
    holder.child.kill('SIGKILL');
    await recordOf(ledger, (r) => r.leaseExpiresAt! < Date.now() - 1_000);
    const started = Date.now();
    const run = await cli(['resume', '--json'], { ledger, timeoutMs: 3 * PATIENCE_MS });
    const elapsed = Date.now() - started;
    expect(run.stderr).toMatch(WAITING);
    expect(run.code).toBe(0);
    const events = jsonLines(run.stdout);
    expect(events.find((e) => e['event'] === 'elsewhere')).toBeUndefined();
    expect(events.find((e) => e['event'] === 'waiting')).toMatchObject({
      taskId: record.taskId,
      leaseHolder: record.leaseHolder,
    });
    expect(events.find((e) => e['event'] === 'resumed')).toMatchObject({ taskId: record.taskId });
    expect(events.at(-1)).toMatchObject({ event: 'closeout', taskId: record.taskId, outcome: 'completed' });
    // taken through the gate, not at once: no proof of death made it sooner
    expect(elapsed).toBeGreaterThanOrEqual(CLI_LEASE_MS);
  });

  it('resume waits for a holder whose lease ran out while it was stopped, and leaves it the task when it renews', async () => {
    const ledger = join(dir, `ledger-${++ledgers}.db`);
    const { holder, record } = await renewingHolder(ledger);
    holder.child.kill('SIGSTOP');
    try {
      await recordOf(ledger, (r) => r.leaseExpiresAt! < Date.now() - 1_000);
      const resume = startCli(['resume', '--json'], { ledger, timeoutMs: 3 * PATIENCE_MS });
      await waitFor('resume to wait', () => (WAITING.test(resume.stderr()) ? true : undefined), PATIENCE_MS);
      // the holder was alive all along (a paused container, a debugger): it renews as soon as it runs again
      holder.child.kill('SIGCONT');
      const run = await resume.done;
      const events = jsonLines(run.stdout);
      expect(events.find((e) => e['event'] === 'resumed')).toBeUndefined();
      expect(events.find((e) => e['event'] === 'elsewhere')).toMatchObject({
        taskId: record.taskId,
        leaseHolder: record.leaseHolder,
      });
      await stillHeldBy(ledger, holder, record.leaseHolder!);
    } finally {
      holder.child.kill('SIGCONT');
    }
  });
});
