/**
 * A narrow harness for a burst of submissions: one TaskClient (a process of its own, bench/followClient.ts) submits
 * `--tasks` tasks to the clockwork server, 32 calls in flight as clientFollow's large run does, and reports the wall
 * time, the client's CPU per submission and its peak RSS (the whole process, baseline included). The same measure as
 * clientFollow's "submit" rows, in seconds rather than minutes, so old and new code can be run back to back
 * (bench/RESULTS.md, section 27). `--profile DIR` writes the inspector's CPU profile of the submissions; `--promoted
 * DIR` a `.heapprofile` of what outlived the young generation while submitting (figures of a profiled run are not
 * comparable to others).
 *
 *   node dist/bench/bench/clientSubmitCost.js [--tasks 10000] [--runs 3] [--profile DIR] [--promoted DIR]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { startClockworkServer } from './clockworkServer.js';
import { fixed, machineLine, median } from './figures.js';
import { positive } from './flags.js';
import { startFollowClient } from './followClient.js';

const { values: flags } = parseArgs({
  options: {
    tasks: { type: 'string' },
    runs: { type: 'string' },
    profile: { type: 'string' },
    promoted: { type: 'string' },
  },
});
const tasks = positive(flags.tasks, 10_000);
const runs = positive(flags.runs, 3);
/** Long enough that no task is polled while the burst lasts: the submissions alone are measured. */
const POLL_MS = 600_000;

interface Submitted {
  wallMs: number;
  cpuUsPerTask: number;
  maxRssMb: number;
}

async function once(dir: string, run: number): Promise<Submitted> {
  const server = await startClockworkServer(POLL_MS);
  const client = startFollowClient({
    kind: 'closeout',
    mode: 'submit',
    url: server.url,
    group: `submit-cost-${run}`,
    offsetsMs: Array.from({ length: tasks }, () => 0),
    ledgerPath: join(dir, `submit-cost-${run}.ledger.db`),
    submitConcurrency: 32,
  });
  try {
    await client.next('ready');
    // the child starts submitting as it reports ready: the profile misses at most its first few calls
    if (flags.profile !== undefined) await client.profile('start');
    if (flags.promoted !== undefined) await client.profile('start', undefined, 'promoted');
    const submitted = await client.next('submitted');
    if (flags.profile !== undefined) await client.profile('stop', join(flags.profile, `submit-${run}.cpuprofile`));
    if (flags.promoted !== undefined) {
      await client.profile('stop', join(flags.promoted, `submit-${run}.heapprofile`), 'promoted');
    }
    return {
      wallMs: submitted.submitMs,
      cpuUsPerTask: submitted.cpuUs / tasks,
      maxRssMb: submitted.maxRssBytes / 1e6,
    };
  } finally {
    await client.kill();
    await server.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'closeout-bench-submit-cost-'));
try {
  console.log(`clientSubmitCost · ${machineLine()}`);
  console.log(`${tasks} submissions, 32 in flight, ${runs} run(s)`);
  const results: Submitted[] = [];
  for (let run = 0; run < runs; run++) {
    const result = await once(dir, run);
    results.push(result);
    console.log(
      `run ${run + 1}: ${fixed(result.wallMs, 0)} ms, ${fixed(result.cpuUsPerTask, 0)} µs of client CPU per submission, peak RSS ${fixed(result.maxRssMb, 1)} MB`,
    );
  }
  console.log(
    `median: ${fixed(median(results.map((r) => r.wallMs)), 0)} ms, ${fixed(median(results.map((r) => r.cpuUsPerTask)), 0)} µs per submission, peak RSS ${fixed(median(results.map((r) => r.maxRssMb)), 1)} MB`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
