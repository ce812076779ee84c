// The `closeout` CLI at its edges, as real processes: output into a closed stdout ends
// quietly and lets followed tasks go (detached, not left "working" under a dead follower), `demo` cleans up after
// itself, `call` takes `--token`, and a missing ledger, a ledger that is a directory, a store in a missing folder and
// https:// to a plain HTTP server each get one accurate line.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type CliRun, jsonDocument, runCli, startCli } from '../support/cli.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-edges-'));
let ledgers = 0;
const newLedger = () => join(dir, `ledger-${++ledgers}.db`);
let server: ServeProcess;
let guarded: ServeProcess;

beforeAll(async () => {
  [server, guarded] = await Promise.all([
    startServe(['--store', join(dir, 'server.db')]),
    startServe(['--store', join(dir, 'guarded.db'), '--token', 's3cret-token=alice']),
  ]);
});

afterAll(async () => {
  await Promise.all([server?.stop(), guarded?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

/** Neither Node's unhandled-error report nor a stack frame: what a person should never see. */
function expectNoCrash(run: CliRun): void {
  expect(run.stderr).not.toMatch(/EPIPE|ERR_STREAM|Unhandled|^\s+at /m);
}

/** The first line of stdout, then the reading end closed, as `| head -1` does. */
async function closeStdoutAfter(child: ReturnType<typeof startCli>, line: RegExp): Promise<string> {
  const seen = await waitFor(
    `a line matching ${line}`,
    () =>
      child
        .stdout()
        .split('\n')
        .find((l) => line.test(l)),
    20_000,
  );
  child.child.stdout!.destroy();
  return seen;
}

/** One line on stderr, starting `closeout: `. */
function oneLine(run: CliRun): string {
  const lines = run.stderr.split('\n').filter((l) => l.length > 0);
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^closeout: /);
  return lines[0]!;
}

describe('closeout at its edges', { timeout: 120_000 }, () => {
  it('call into a closed stdout: no EPIPE trace, the task is left detached for resume', async () => {
    const ledger = newLedger();
    const call = startCli(['call', server.url, 'batch_job', '--args', '{"items":40,"stepMs":250}'], {
      ledger,
      timeoutMs: 60_000,
    });
    const first = await closeStdoutAfter(call, /^task \S+ \(batch_job/);
    const taskId = /^task (\S+)/.exec(first)![1]!;
    const run = await call.done;
    expectNoCrash(run);
    expect(run.signal).toBeNull();
    expect(run.code).toBe(130);
    // the handle is let go: detached in the ledger, not "working" under a follower that is gone
    const listed = jsonDocument((await runCli(['ls', '--json'], { ledger })).stdout);
    expect(listed['tasks']).toEqual([expect.objectContaining({ taskId, localState: 'detached' })]);
    // and the next process takes it up at once (no lease of the dead follower to wait out)
    const resumed = await runCli(['resume', taskId, '--json'], { ledger, timeoutMs: 60_000 });
    expect(resumed.stderr).toBe('');
    expect(resumed.code).toBe(0);
  });

  it('ls into a stdout closed before it writes ends quietly with 0', async () => {
    const ledger = newLedger();
    expect((await runCli(['call', server.url, 'echo', '--arg', 'text=hi'], { ledger })).code).toBe(0);
    const ls = startCli(['ls', '--all'], { ledger });
    ls.child.stdout!.destroy();
    const run = await ls.done;
    expectNoCrash(run);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
  });

  it('demo into a closed stdout stops quietly and removes its temporary folder', async () => {
    const demo = startCli(['demo'], { timeoutMs: 60_000 });
    const line = await closeStdoutAfter(demo, /^\s+ledger\s+\S+ledger\.db/);
    const folder = /(\S+)[/\\]ledger\.db/.exec(line)![1]!;
    const run = await demo.done;
    expectNoCrash(run);
    expect(run.signal).toBeNull();
    expect(run.code).toBe(130);
    expect(existsSync(folder)).toBe(false);
  });

  it('demo prints its `show --ledger` hint only when --keep kept the ledger', async () => {
    const [plain, kept] = await Promise.all([
      runCli(['demo'], { timeoutMs: 60_000 }),
      runCli(['demo', '--keep'], { timeoutMs: 60_000 }),
    ]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(kept.code, kept.stderr).toBe(0);
    const folderOf = (run: CliRun) => /ledger\s+(\S+)[/\\]ledger\.db/.exec(run.stdout)![1]!;
    expect(existsSync(folderOf(plain))).toBe(false);
    expect(plain.stdout).not.toContain('closeout show TASK_ID');
    expect(plain.stdout).not.toContain('closeout console');
    const keptFolder = folderOf(kept);
    try {
      expect(existsSync(join(keptFolder, 'ledger.db'))).toBe(true);
      expect(kept.stdout).toContain(`closeout show TASK_ID --ledger ${join(keptFolder, 'ledger.db')}`);
      expect(kept.stdout).toContain(
        `closeout console --ledger ${join(keptFolder, 'ledger.db')} --store ${join(keptFolder, 'server.db')}`,
      );
    } finally {
      rmSync(keptFolder, { recursive: true, force: true });
    }
  });

  it('call takes --token like doctor, and never stores it', async () => {
    const ledger = newLedger();
    const refused = await runCli(['call', guarded.url, 'echo', '--arg', 'text=hi'], { ledger });
    expect(refused.code).toBe(1);
    expect(oneLine(refused)).toContain('HTTP 401');
    const run = await runCli(['call', guarded.url, 'echo', '--arg', 'text=hi', '--token', 's3cret-token'], {
      ledger,
    });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('✔ result  echo');
    expect(readFileSync(ledger).includes('s3cret-token')).toBe(false);
  });

  it('ls on a ledger path that does not exist says there is no ledger there', async () => {
    const missing = join(dir, 'nowhere', 'ledger.db');
    const run = await runCli(['ls', '--ledger', missing]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`no ledger at ${missing} yet: \`closeout call\` creates it\n`);
    const json = await runCli(['ls', '--ledger', missing, '--json']);
    expect(jsonDocument(json.stdout)).toEqual({ ledger: missing, exists: false, all: false, tasks: [] });
    expect(existsSync(missing)).toBe(false);
  });

  it('a --ledger that is a directory gets one line that says so, from every command', async () => {
    const folder = join(dir, 'a-folder');
    mkdirSync(folder);
    const runs = await Promise.all([
      runCli(['ls', '--ledger', folder]),
      runCli(['show', 'abcdef', '--ledger', folder]),
      runCli(['resume', '--ledger', folder]),
      runCli(['call', server.url, 'echo', '--arg', 'text=hi', '--ledger', folder]),
    ]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(1);
      expect(oneLine(run)).toBe(
        `closeout: the ledger ${folder} is a directory: pass --ledger with a file in it, e.g. ${join(folder, 'ledger.db')}`,
      );
    }
  });

  it('serve --store in a missing folder gets one line that names the folder', async () => {
    const store = join(dir, 'no-such-folder', 'server.db');
    const child = startCli(['serve', '--port', '0', '--store', store]);
    const run = await child.done;
    expect(run.code).toBe(1);
    expect(oneLine(run)).toBe(
      `closeout: cannot create the store ${store}: the folder ${join(dir, 'no-such-folder')} does not exist; create it, or pass --store with a path in an existing folder`,
    );
  });

  it('https:// to a plain HTTP server gets one line that says to use http://', async () => {
    const https = server.url.replace(/^http:/, 'https:');
    const run = await runCli(['call', https, 'echo', '--arg', 'text=hi'], { ledger: newLedger() });
    expect(run.code).toBe(1);
    expect(oneLine(run)).toBe(
      `closeout: ${https} does not speak TLS (it answered in plain HTTP): use ${server.url}, or check the server's TLS setup`,
    );
  });

  it("the server's log names doctor's deliberate probes as such", async () => {
    const before = server.stderr().length;
    const doctor = await runCli(['doctor', server.url, '--try-listed-tools'], { timeoutMs: 60_000 });
    expect(doctor.code, doctor.stdout + doctor.stderr).toBe(0);
    await waitFor('the Mcp-Name probe in the log', () =>
      server.stderr().slice(before).includes('Mcp-Name') ? true : undefined,
    );
    const lines = server
      .stderr()
      .slice(before)
      .split('\n')
      // the server's complaints; the activity log's lines (tasks created and finished) are not complaints
      .filter((l) => l.startsWith('[closeout serve]'));
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(line).toContain('a deliberate probe by `closeout doctor`');
  });
});
