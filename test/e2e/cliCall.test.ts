// `closeout call` and `closeout resume` as real processes against a real `closeout serve`: a plain result printed at
// once, a task followed to its close-out (one JSON object per event with --json, the last the close-out), exit codes
// that say how it ended, input answered from flags, and Ctrl-C detaching a task that a second process then closes out.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { jsonDocument, jsonLines, runCli, startCli } from '../support/cli.js';
import { CLI, type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-call-'));
let ledgers = 0;
/** Each test its own ledger: the tests run concurrently, and `resume` takes up every open task of a ledger. */
const newLedger = () => join(dir, `ledger-${++ledgers}.db`);
let server: ServeProcess;
let url: string;

beforeAll(async () => {
  server = await startServe(['--store', join(dir, 'server.db')]);
  url = server.url;
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ESC = '\u001b[';

describe.concurrent('closeout call', { timeout: 60_000 }, () => {
  it('prints a plain result at once, as text or as one JSON document', async () => {
    const ledger = newLedger();
    const [text, json] = await Promise.all([
      runCli(['call', url, 'echo', '--arg', 'text=hello there'], { ledger }),
      runCli(['call', url, 'echo', '--args', '{"text":"as json"}', '--json'], { ledger }),
    ]);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain('✔ result  echo');
    expect(text.stdout).toContain('  hello there');
    // colour only on a terminal
    expect(text.stdout).not.toContain(ESC);
    expect(json.code).toBe(0);
    const doc = jsonDocument(json.stdout);
    expect(doc).toMatchObject({ event: 'closeout', outcome: 'completed', task: false, exitCode: 0, tool: 'echo' });
    expect(doc['result']).toMatchObject({ content: [{ type: 'text', text: 'as json' }] });
  });

  it('follows a task to its close-out: one JSON object per event, the last the close-out', async () => {
    const ledger = newLedger();
    const run = await runCli(
      ['call', url, 'batch_job', '--args', '{"items":3,"stepMs":250}', '--correlation-id', 'order-7', '--json'],
      { ledger },
    );
    expect(run.code).toBe(0);
    const events = jsonLines(run.stdout);
    expect(events[0]).toMatchObject({ event: 'submitted', tool: 'batch_job', endpoint: url, status: 'working' });
    const taskId = events[0]!['taskId'] as string;
    expect(taskId).toMatch(/^[\w-]{16,}$/);
    expect(events.filter((e) => e['event'] === 'status').length).toBeGreaterThanOrEqual(1);
    expect(events.every((e) => e['taskId'] === taskId)).toBe(true);
    const last = events.at(-1)!;
    expect(last).toMatchObject({ event: 'closeout', outcome: 'completed', status: 'completed', exitCode: 0 });
    expect(last['result']).toMatchObject({ structuredContent: { processed: 3 } });

    const listed = jsonDocument((await runCli(['ls', '--all', '--json'], { ledger })).stdout);
    const tasks = listed['tasks'] as Record<string, unknown>[];
    expect(tasks.find((t) => t['taskId'] === taskId)).toMatchObject({
      tool: 'batch_job',
      status: 'completed',
      localState: 'terminal',
      correlationId: 'order-7',
    });
  });

  it('prints plain lines when stdout is not a terminal: status, status message, close-out, result', async () => {
    const ledger = newLedger();
    const run = await runCli(['call', url, 'batch_job', '--args', '{"items":6,"stepMs":500}'], { ledger });
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^task \S+ \(batch_job at http:/m);
    expect(run.stdout).toMatch(/\] working · Processed \d of 6 items/);
    expect(run.stdout).toMatch(/✔ completed {2}batch_job \S+ {2}after /);
    expect(run.stdout).toContain('  Processed 6 items');
    expect(run.stdout).not.toContain(ESC);
  });

  it('exits 2 when the task fails, with the server’s JSON-RPC error', async () => {
    const ledger = newLedger();
    const run = await runCli(['call', url, 'flaky_upstream', '--json'], { ledger });
    expect(run.code).toBe(2);
    const last = jsonLines(run.stdout).at(-1)!;
    expect(last).toMatchObject({ event: 'closeout', outcome: 'failed', exitCode: 2 });
    expect(last['error']).toMatchObject({ code: -32603, message: 'Upstream API rate limit exceeded' });
  });

  it('answers an elicitation from --accept (defaults fill the rest) and shows the server’s words as its own', async () => {
    const ledger = newLedger();
    const run = await runCli(
      ['call', url, 'approve_deploy', '--arg', 'env=staging', '--accept', '{"note":"e2e"}', '--json'],
      { ledger },
    );
    expect(run.code).toBe(0);
    const events = jsonLines(run.stdout);
    expect(events.find((e) => e['event'] === 'input')).toMatchObject({
      key: 'approval',
      method: 'elicitation/create',
      mode: 'form',
      message: 'Deploy to staging?',
      from: url,
    });
    expect(events.find((e) => e['event'] === 'answered')).toMatchObject({ action: 'accept', how: 'flags' });
    expect(events.at(-1)).toMatchObject({ event: 'closeout', outcome: 'completed', exitCode: 0 });
    expect(JSON.stringify(events.at(-1)!['result'])).toContain('Deployed to staging (e2e)');

    const declined = await runCli(['call', url, 'approve_deploy', '--arg', 'env=prod', '--decline'], { ledger });
    // the tool completes with isError: a tool error is not a success
    expect(declined.code).toBe(2);
    expect(declined.stdout).toContain('the server says:');
    expect(declined.stdout).toContain('  │ Deploy to prod?');
    expect(declined.stdout).toContain('Deployment to prod was not approved');
  });

  it('without a terminal or answer flags, leaves the task waiting for input (exit 5); answer and resume close it out', async () => {
    const ledger = newLedger();
    const call = await runCli(['call', url, 'approve_deploy', '--arg', 'env=qa', '--json'], { ledger });
    expect(call.code).toBe(5);
    const events = jsonLines(call.stdout);
    const taskId = events[0]!['taskId'] as string;
    expect(events.at(-1)).toMatchObject({
      event: 'closeout',
      outcome: 'detached',
      detachReason: 'needs-input',
      exitCode: 5,
      status: 'input_required',
    });
    expect(call.stderr).toContain(`task ${taskId} needs input this process cannot give`);

    // an answer that does not fit the form is refused here, naming the field, and nothing reaches the server
    const unfit = await runCli(['answer', taskId, '--accept', '{"approve":"yes"}'], { ledger });
    expect(unfit.code).not.toBe(0);
    expect(unfit.stderr).toMatch(/not answered: --accept does not fit the form: approve must be boolean/);
    const stray = await runCli(['answer', taskId, '--accept', '{"approve":true,"colour":"red"}'], { ledger });
    expect(stray.code).not.toBe(0);
    expect(stray.stderr).toMatch(
      /--accept has field\(s\) the form does not ask for: colour \(it asks for approve, note\)/,
    );

    const answer = await runCli(['answer', taskId, '--accept', '{"approve":true,"note":"from answer"}'], { ledger });
    expect(answer.code, answer.stderr).toBe(0);
    // it says the answer was taken: sent, recorded, and what follows the task now (not its state from before the answer)
    expect(answer.stdout.trimEnd().split('\n').slice(-2)).toEqual([
      '✔ sent approval: accept',
      `the server has the answer (recorded in the ledger too); \`closeout resume ${taskId}\` follows task ${taskId} to its end`,
    ]);
    expect(answer.stdout).not.toContain('input_required');

    const resume = await runCli(['resume', taskId, '--json'], { ledger });
    expect(resume.code).toBe(0);
    const last = jsonLines(resume.stdout).at(-1)!;
    expect(last).toMatchObject({ event: 'closeout', taskId, outcome: 'completed' });
    expect(JSON.stringify(last['result'])).toContain('Deployed to qa (from answer)');
  });

  it('--detach prints only the taskId once the handle is in the ledger; an idempotency key gives the same task', async () => {
    const ledger = newLedger();
    const args = ['call', url, 'batch_job', '--args', '{"items":2,"stepMs":200}', '--idempotency-key', 'nightly-1'];
    const first = await runCli([...args, '--detach'], { ledger });
    expect(first.code).toBe(0);
    const taskId = first.stdout.trim();
    expect(taskId).toMatch(/^[\w-]{16,}$/);
    expect(first.stderr).toContain(`closeout resume ${taskId}`);
    const open = jsonDocument((await runCli(['ls', '--json'], { ledger })).stdout);
    expect((open['tasks'] as Record<string, unknown>[]).map((t) => t['taskId'])).toContain(taskId);

    const again = await runCli([...args, '--json'], { ledger });
    expect(again.code).toBe(0);
    expect(jsonLines(again.stdout).at(-1)).toMatchObject({ event: 'closeout', taskId, outcome: 'completed' });
  });

  it('Ctrl-C detaches (never cancels); a second process resumes the task and closes it out', async () => {
    const ledger = newLedger();
    const running = startCli(['call', url, 'batch_job', '--args', '{"items":16,"stepMs":250}', '--json'], { ledger });
    const taskId = await waitFor('a status message', () => {
      const events = running.stdout().trim() ? jsonLines(running.stdout()) : [];
      const progress = events.find(
        (e) => e['event'] === 'status' && String(e['statusMessage']).startsWith('Processed'),
      );
      return progress ? (progress['taskId'] as string) : undefined;
    });
    running.child.kill('SIGINT');
    const interrupted = await running.done;
    expect(interrupted.code).toBe(130);
    expect(jsonLines(interrupted.stdout).at(-1)).toMatchObject({
      event: 'closeout',
      taskId,
      outcome: 'detached',
      detachReason: 'interrupted',
      exitCode: 130,
    });

    const shown = jsonDocument((await runCli(['show', taskId, '--json'], { ledger })).stdout);
    expect(shown['record']).toMatchObject({ taskId, localState: 'detached', status: 'working' });
    expect((shown['record'] as Record<string, unknown>)['cancelRequestedAt']).toBeUndefined();

    const resumed = await runCli(['resume', '--json'], { ledger });
    expect(resumed.code).toBe(0);
    const events = jsonLines(resumed.stdout);
    expect(events[0]).toMatchObject({ event: 'resume', open: 1 });
    expect(events.find((e) => e['event'] === 'resumed')).toMatchObject({ taskId });
    const last = events.at(-1)!;
    expect(last).toMatchObject({ event: 'closeout', taskId, outcome: 'completed', exitCode: 0 });
    expect(last['result']).toMatchObject({ structuredContent: { processed: 16 } });
  });

  it.skipIf(spawnSync('script', ['--version']).status !== 0)('draws live lines in colour on a terminal', async () => {
    const ledger = newLedger();
    // `script` gives the CLI a pseudo-terminal, as a person's shell would
    const command = `stty cols 120; ${process.execPath} ${CLI} call ${url} batch_job --args '{"items":3,"stepMs":250}'`;
    const child = spawn('script', ['-qec', command, '/dev/null'], {
      env: { ...process.env, CLOSEOUT_LEDGER: ledger, NO_COLOR: undefined, TERM: 'xterm' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const [code] = (await once(child, 'close')) as [number];
    expect(code).toBe(0);
    expect(output).toContain(`${ESC}32m✔ completed`);
    // the live line: spinner, tool, short taskId, status, elapsed time and the next poll, redrawn in place
    expect(output).toMatch(/batch_job \S+ \S*working\S* · .*(next poll in \d|polling)/);
    expect(output).toContain(`${ESC}1F${ESC}0J`);
  });
});
