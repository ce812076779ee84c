// Every benchmark still runs and prints its figures: each script's --smoke mode (tiny N), compiled as `npm run bench`
// compiles it, run as a child process. Not a measurement: only that the figures are there and numeric, and exit 0.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSC = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
const script = (name: string) => fileURLToPath(new URL(`../../dist/bench/bench/${name}.js`, import.meta.url));

async function smoke(name: string, timeout = 60_000): Promise<string> {
  const { stdout } = await run(process.execPath, [script(name), '--smoke'], { cwd: ROOT, timeout });
  return stdout;
}

/** The row of a printed table whose first cell is `label`, split into its cells. */
function row(output: string, label: string): string[] {
  const line = output.split('\n').find((l) => l.startsWith(`${label} `));
  expect(line, `a row "${label}" in:\n${output}`).toBeDefined();
  return line!.trim().split(/\s{2,}/);
}

const NUMBER = /^\d+(\.\d+)?$/;

beforeAll(async () => {
  await run(process.execPath, [TSC, '-p', 'bench/tsconfig.json'], { cwd: ROOT, timeout: 120_000 });
}, 120_000);

describe.concurrent('benchmark smoke runs', () => {
  it('serverOverhead prints throughput, latency and CPU for every scenario, and the ratios', async () => {
    // eleven scenarios, one round each: about 55 s on a machine at load 20
    const output = await smoke('serverOverhead', 120_000);
    for (const label of ['floor', 'a', 'b', 'c', 'c.sdk']) {
      const cells = row(output, label);
      // key, label, req/s, p50, p99, server CPU: four numbers after the label
      for (const cell of cells.slice(-4)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
    }
    // PostgreSQL rows, or the line saying why they were skipped
    if (!/^d skipped: /m.test(output))
      for (const label of ['d.b', 'd.c']) expect(row(output, label).at(-1)).toMatch(NUMBER);
    for (const ratio of ['b/a', 'c/a', 'c/c.sdk', 'a/floor', 'b/f.b']) expect(row(output, ratio)[1]).toMatch(NUMBER);
    // the fast path's tasks/get against a plain SDK tools/call, by server CPU (bench/RESULTS.md section 12)
    expect(output).toMatch(/^tasks\/get fast path: server CPU per request c\/a = \d+\.\d\d \(target <= 0\.35 /m);
  }, 150_000);

  it('stepCost prints tasks/s and latencies of a plain handler and of durable steps, and the ratios', async () => {
    const output = await smoke('stepCost');
    for (const label of ['sqlite.plain', 'sqlite.step', 'sqlite.checkpoint', 'sqlite.steps10']) {
      const cells = row(output, label);
      for (const cell of cells.slice(2, 5)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
      if (label !== 'sqlite.plain') for (const cell of cells.slice(5)) expect(cell).toMatch(NUMBER);
    }
    expect(output).toMatch(
      /^sqlite throughput against plain: step \d+\.\d\d, checkpoint \d+\.\d\d, ten steps \d+\.\d\d$/m,
    );
    expect(output).toMatch(/^postgres (throughput against plain: step \d|skipped: )/m);
  }, 90_000);

  it('walGrowth prints throughput and the WAL size window by window', async () => {
    const output = await smoke('walGrowth');
    expect(output).toMatch(/^largest WAL over the run: \d+\.\d MiB after \d+ tasks$/m);
    const windows = output.split('\n').filter((l) => /^\d+\s{2,}\d+\s{2,}/.test(l));
    expect(windows.length, output).toBeGreaterThan(0);
    for (const cell of windows[0]!.trim().split(/\s{2,}/)) expect(cell, output).toMatch(NUMBER);
  }, 90_000);

  it('serverRecovery settles every interrupted task and prints the times', async () => {
    const output = await smoke('serverRecovery');
    for (const label of ['ready after the crash', 'every non-resumable task failed', 'every task terminal']) {
      const line = output.split('\n').find((l) => l.startsWith(label));
      expect(line, `${label} in:\n${output}`).toMatch(/\s\d+$/);
    }
    expect(output).toMatch(/^outcomes: .*, 0 wrong$/m);
  }, 90_000);

  it('clientFollow prints every figure for the TaskClient and the ext-tasks client', async () => {
    const output = await smoke('clientFollow');
    const labels = [
      'waiting, first interval, % of one core',
      'waiting, first interval, client CPU µs/poll',
      'waiting, first interval, full collections',
      'waiting, % of one core',
      'waiting, client CPU µs/poll',
      'waiting, full collections',
      'live heap while waiting over baseline, MB',
      'follow, client CPU µs/task',
      'peak RSS over baseline, MB',
      'tasks/get per task',
    ];
    for (const label of labels) {
      const cells = row(output, label);
      // one column per client run: TaskClient small, ext-tasks small, TaskClient large, the same with a heap cap, and
      // the SDK alone following the large run's tasks
      expect(cells.slice(1), `${label} in:\n${output}`).toHaveLength(5);
      for (const cell of cells.slice(1)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
    }
    expect(row(output, 'tasks/get after terminal').slice(1)).toEqual(['0', '0', '0', '0', '0']);
    expect(row(output, 'tasks not closed out completed').slice(1)).toEqual(['0', '0', '0', '0', '0']);
    // the SDK alone under the large run's targets: its peak RSS and its share of a core while waiting
    expect(output).toMatch(/^ {2}\(floor\) the SDK alone, \d+ tasks, peak +\d+\.\d MB *$/m);
    expect(output).toMatch(/^ {2}\(floor\) the SDK alone, \d+ tasks, waiting +\d+\.\d% *$/m);
    // the steady state is judged; the first interval after the submissions is shown beside it
    expect(output).toMatch(/^ {2}same, first interval after the submissions +\d+\.\d% *$/m);
    // the floor: a tasks/get through the SDK alone and as raw HTTP, each a number of µs
    for (const label of ['SDK Client.request, same fetch', 'raw HTTP, prebuilt bytes'])
      expect(row(output, label)[1], `${label} in:\n${output}`).toMatch(NUMBER);
    // CPU per waiting poll against the raw floor, and the same raw requests paced as a waiting client
    expect(output).toMatch(
      /^\d+ tasks: CPU per waiting poll <= 1\.5x raw HTTP +\d+ \/ \d+ µs = x\d+\.\d\d +(met|NOT MET) *$/m,
    );
    expect(output).toMatch(/^ {2}\(floor\) raw HTTP paced as a waiting client +\d+ µs, x\d+\.\d\d *$/m);
    expect(output).toMatch(
      /^ {2}\(floor\) the same, each answer checked as a TaskClient checks it +\d+ µs, x\d+\.\d\d *$/m,
    );
  }, 90_000);

  it('clientResume re-queries every open record once and prints the times', async () => {
    const output = await smoke('clientResume');
    expect(row(output, 'process start to resumeAll() returned, ms').at(-1)).toMatch(NUMBER);
    expect(output).toMatch(/^process spawn to all \d+ re-queried, ms\s+\d+$/m);
    expect(row(output, 'tasks/get beyond one per task (must be 0)').at(-1)).toBe('0');
    expect(output).toMatch(/^server rate: \d+ tasks\/get per second/m);
    expect(output).toMatch(/^all \d+ re-queried within 2 s \+ N \/ server rate +\d+ ms +\d+ ms +(met|NOT MET)$/m);
    // the floor: the SDK alone resuming the same ledger
    expect(row(output, '(floor) the SDK alone: process spawn to all 50 re-queried, ms').at(-1)).toMatch(NUMBER);
    expect(output).toMatch(
      /^\(floor\) the SDK alone resuming: spawn, one SELECT, \d+ tasks\/get +\d+ ms +(fits the allowance|over the allowance alone)$/m,
    );
  }, 90_000);

  // runningTasks starts an embedded PostgreSQL, storeGrowth seeds two stores: longer bounds
  it('ledgerNotes prints the CPU and WAL bytes of a schedule note by the size of the arguments, and their ratios', async () => {
    const output = await smoke('ledgerNotes');
    for (const label of ['40 B', '4096 B', '16384 B']) {
      for (const cell of row(output, label).slice(1)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
    }
    expect(output).toMatch(/^16 KiB \/ 40 B arguments: CPU a note \d+\.\d\d, WAL a note \d+\.\d\d$/m);
  }, 90_000);

  it('runningTasks prints the lease loop, event-loop and tasks/get figures per store, and the targets', async () => {
    const output = await smoke('runningTasks', 150_000);
    const stores = /^PostgreSQL skipped: /m.test(output) ? ['SQLite'] : ['SQLite', 'PostgreSQL'];
    for (const store of stores) {
      const cells = row(output, store);
      // store, running, 12 timings (n/a when nothing of its kind ran in the window; the least lease left is below zero
      // when a lease ran out before its renewal), lapses, re-runs, errors
      expect(cells, `${store} in:\n${output}`).toHaveLength(17);
      for (const cell of cells.slice(1)) expect(cell, `${store} in:\n${output}`).toMatch(/^(-?\d+(\.\d+)?|n\/a)$/);
      for (const cell of [cells[1], ...cells.slice(-3)]) expect(cell, `${store} in:\n${output}`).toMatch(NUMBER);
    }
    expect(output).toMatch(/^SQLite \d+: 0 lapses, 0 re-runs +\d+, \d+ +(met|NOT MET)$/m);
    expect(output).toMatch(/^SQLite \d+: event-loop block < 100 ms +\d+ ms +(met|NOT MET)$/m);
  }, 180_000);

  it('storeGrowth prints tasks/get on an empty and a grown store, and their ratio', async () => {
    const output = await smoke('storeGrowth', 150_000);
    for (const label of ['SQLite empty', 'SQLite grown']) {
      const cells = row(output, label);
      for (const cell of cells.slice(1, 4)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
      expect(cells.at(-1), `${label} in:\n${output}`).toBe('0');
    }
    expect(output).toMatch(/^SQLite: tasks\/get p99 grown\/empty <= 1\.2 +\d+\.\d\d +(met|NOT MET)$/m);
    expect(output).toMatch(/^SQLite: seeded in \d+\.\d s, grown store \d+ MiB$/m);
  }, 180_000);

  it('purgeRate prints creation and purge rates and the backlog, bucket by bucket', async () => {
    const output = await smoke('purgeRate');
    const buckets = output.split('\n').filter((l) => /^\d+\s{2,}(\d+|n\/a)\s{2,}/.test(l));
    expect(buckets.length, output).toBeGreaterThan(1);
    for (const cell of buckets
      .at(-1)!
      .trim()
      .split(/\s{2,}/))
      expect(cell, output).toMatch(NUMBER);
    expect(output).toMatch(/^created \d+ tasks in \d+ s; purge steps \d+, .* errors 0$/m);
    expect(output).toMatch(
      /^(backlog flat: last bucket median <= first \+ \d+ .*(met|NOT MET)|backlog flat: run too short.*)$/m,
    );
  }, 90_000);

  it('pushLateness closes every task out on both clients and prints lateness and requests for each', async () => {
    // the PostgreSQL case starts a cluster of its own: more time on a loaded machine
    const output = await smoke('pushLateness', 150_000);
    for (const label of ['push', 'polling']) {
      const cells = row(output, label);
      // closed, p50, p99, max, tasks/get per task, listens
      for (const cell of cells.slice(1)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
    }
    expect(row(output, 'polling').at(-1)).toBe('0');
    // the waiting client: a first window, then the steady state
    for (const label of ['client cpu % of one core', 'tasks/get per second', 'full collections (V8)']) {
      const cells = row(output, label).slice(-2);
      expect(cells, `${label} in:\n${output}`).toHaveLength(2);
      for (const cell of cells) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
    }
    // the two-instance case ran, or the line says why it was skipped
    expect(output).toMatch(/terminal write on instance A|PostgreSQL skipped/);
  }, 180_000);

  // an embedded PostgreSQL and three worker processes on its ledger
  it('clientFleet closes out every task with three workers on one PostgreSQL ledger, one killed, and prints the figures', async () => {
    const output = await smoke('clientFleet', 150_000);
    for (const worker of ['worker 0 (killed)', 'worker 1', 'worker 2']) {
      const cells = row(output, worker);
      // tasks, submit CPU, follow CPU, % of one core, RSS
      for (const cell of cells.slice(-5)) expect(cell, `${worker} in:\n${output}`).toMatch(NUMBER);
    }
    for (const label of [
      "tasks/get per task over ideal, survivors' own, median",
      "tasks/get per task over ideal, killed worker's, p99",
      'kill to first re-query by a survivor, ms',
    ]) {
      expect(row(output, label).at(-1), `${label} in:\n${output}`).toMatch(NUMBER);
    }
    expect(output).toMatch(/^kill to all \d+ re-queried, ms +\d+$/m);
    // over-polling is a figure to read, not a smoke failure: on a loaded machine a worker too slow to renew its
    // leases rightly has records taken over while it still polls them
    for (const label of ["survivors' own tasks polled > ideal + 2", "tasks/get after terminal, survivors' own"]) {
      expect(row(output, label).at(-1), `${label} in:\n${output}`).toMatch(NUMBER);
    }
    expect(row(output, 'records left open (must be 0)').at(-1)).toBe('0');
  }, 180_000);

  it('pushServerCost prints what followed tasks cost the server: open time, memory, idle and per-change CPU', async () => {
    const output = await smoke('pushServerCost');
    for (const label of ['open ms', 'heap per task B', 'idle cpu %', 'push cpu per change us', 'change wall ms']) {
      // heap figures may come out negative after a GC: the sign is allowed, the number is required
      expect(row(output, label).at(-1), `${label} in:\n${output}`).toMatch(/^-?\d+(\.\d+)?$/);
    }
  }, 90_000);

  it('postgresCreate prints creation on SQLite and PostgreSQL, the counted round trips and the targets', async () => {
    const output = await smoke('postgresCreate', 120_000);
    for (const label of ['sqlite', 'pg.1', 'pg.16', 'pg.1@1000', 'pg.floor', 'pg.1.durable', 'pg.floor.durable']) {
      for (const cell of row(output, label).slice(1)) expect(cell, `${label} in:\n${output}`).toMatch(NUMBER);
    }
    for (const label of ['create', 'get', 'finish']) expect(row(output, label)[1]).toMatch(NUMBER);
    expect(row(output, 'round trips per create <= 2')[1]).toMatch(NUMBER);
    expect(row(output, 'pg.1 / pg.floor (this store against the floor)')[1]).toMatch(NUMBER);
    expect(row(output, 'pg.1.durable / sqlite, both syncing every commit, >= 0.7')[1]).toMatch(NUMBER);
    expect(row(output, 'pg.floor.durable / sqlite (the floor, syncing)')[1]).toMatch(NUMBER);
    // where a task's time goes: the second table's rows, each PostgreSQL scenario with its statements' execution time
    const perTask = output.slice(output.indexOf('per task (medians)'));
    expect(row(perTask, 'per task (medians)')).toContain('PostgreSQL exec µs');
    for (const label of ['pg.1', 'pg.floor', 'pg.1.durable', 'pg.floor.durable']) {
      const cells = row(perTask, label);
      expect(cells, `${label} in:\n${perTask}`).toHaveLength(6);
      for (const cell of cells.slice(1)) expect(cell, `${label} in:\n${perTask}`).toMatch(NUMBER);
    }
  }, 150_000);
});
