/**
 * `closeout demo`: the whole client half in one command, against a demo server it starts on a temporary SQLite file:
 * a plain result, a task followed to its close-out, an input answered, a cancel, a detach followed by a resume from
 * a fresh process, and the ledger at the end. Without a terminal on stdin it answers from its flags (or the form's
 * defaults), so it runs unattended.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import type { CallToolResult } from '@modelcontextprotocol/client';
import type { Command } from 'commander';

import type { TaskClient, TaskClientEvent, TaskHandle } from '../../client/index.js';
import { isTaskHandle } from '../../client/index.js';
import { registerDemoTools } from '../../demo/demoTools.js';
import type { JsonObject } from '../../protocol/index.js';
import { serveTaskServer, SqliteTaskStore, TaskServer } from '../../server/index.js';
import { CliError } from '../cliError.js';
import { EXIT } from '../exitCodes.js';
import { ClientSession } from '../session.js';
import { outputClosed } from '../terminal/closedOutput.js';
import type { PresetAnswer } from '../terminal/elicitationPrompt.js';
import { canPrompt, elicitationHandler } from '../terminal/elicitationPrompt.js';
import type { CloseOut } from '../terminal/follow.js';
import { Follower } from '../terminal/follow.js';
import { Output } from '../terminal/output.js';
import { recordTable, resultLines } from '../terminal/recordView.js';
import { serverBlock } from '../terminal/serverText.js';

interface DemoFlags {
  unattended?: boolean;
  decline?: boolean;
  keep?: boolean;
}

const CLI_PATH = fileURLToPath(new URL('../main.js', import.meta.url));

export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description('Start a demo server on a temporary SQLite file and show every client feature against it')
    .option('--unattended', 'answer the approval from the flags or the form’s defaults, even at a terminal')
    .option('--decline', 'decline the approval (the deploy then ends with a tool error)')
    .option('--keep', 'keep the temporary directory (server store and ledger) and print where it is')
    .action(runDemo);
}

async function runDemo(flags: DemoFlags): Promise<void> {
  const out = new Output({});
  const c = out.c;
  const dir = mkdtempSync(join(tmpdir(), 'closeout-demo-'));
  const ledgerPath = join(dir, 'ledger.db');
  const storePath = join(dir, 'server.db');
  const store = new SqliteTaskStore(storePath);
  const tasks = registerDemoTools(new TaskServer({ store }));
  const serving = await serveTaskServer(tasks, { port: 0, serverInfo: { name: 'closeout-demo', version: '0.1.0' } });
  const url = serving.url;
  const interactive = canPrompt(out) && !flags.unattended;
  const preset: PresetAnswer | undefined = interactive
    ? undefined
    : flags.decline
      ? { action: 'decline' }
      : { action: 'accept', content: {} };
  const session = ClientSession.open({
    ledgerPath,
    namedServer: url,
    inputHandlers: (endpoint) => ({ elicitation: elicitationHandler(current, endpoint) }),
    onEvent: (event) => {
      if (event.type === 'push') lastPush = event;
      current.onClientEvent(event);
    },
  });
  let current = new Follower(out, (id) => session.ledger.get(id), {
    interactive,
    preset,
    now: () => session.ledger.now(),
  });
  /** How tasks are followed now (push or polling): told to each step's Follower, which may come after the news. */
  let lastPush: TaskClientEvent | undefined;
  const problems: string[] = [];
  const expect = (what: string, ok: boolean) => {
    if (!ok) problems.push(what);
  };
  const heading = (n: number, title: string) => {
    stopIfGone();
    out.line(`\n${c.bold(`${n}. ${title}`)}`);
  };
  const shell = (command: string) => out.line(c.dim(`   $ ${command}`));
  /** Follow one handle in a fresh Follower (each step prints its own close-out). */
  const follow = async (handle: TaskHandle, during?: (handle: TaskHandle) => Promise<void>): Promise<CloseOut> => {
    current = new Follower(out, (id) => session.ledger.get(id), {
      interactive,
      preset,
      now: () => session.ledger.now(),
    });
    current.arm();
    current.follow(handle, url, 'submitted');
    if (lastPush) current.onClientEvent(lastPush);
    if (during) await during(handle);
    const [closeOut] = await current.done();
    stopIfGone();
    if (current.wasInterrupted) {
      const left = flags.keep ? `: the tasks it left are in the ledger ${ledgerPath}` : '';
      throw new CliError(`demo interrupted${left}`, EXIT.interrupted);
    }
    return closeOut as CloseOut;
  };
  /** Nobody reads the demo any more (`| head -1`): stop at the next step, quietly, and clean up. */
  const stopIfGone = () => {
    if (outputClosed()) throw new CliError('', EXIT.interrupted);
  };

  const call = (client: TaskClient, tool: string, args: JsonObject) =>
    client.callTool(tool, args, { correlationId: `demo-${tool}` });

  try {
    out.line(
      c.bold('closeout demo') + c.dim(': a demo task server on a temporary SQLite file, and the closeout client'),
    );
    out.line(`   server  ${url}  ${c.dim(`(store ${storePath})`)}`);
    out.line(`   ledger  ${ledgerPath}`);
    const client = await session.client(url);

    heading(1, 'A plain call: echo answers at once, no task');
    shell(`closeout call ${url} echo --arg text="hello from closeout"`);
    const echoed = await call(client, 'echo', { text: 'hello from closeout' });
    expect('echo answers with a plain result', !isTaskHandle(echoed));
    if (!isTaskHandle(echoed)) {
      out.line(`${c.green('✔ result')}  echo ${c.dim('(no task: the server answered at once)')}`);
      for (const line of resultLines(echoed as CallToolResult, c)) out.line(line);
    }

    heading(2, 'A task followed until it closes out: batch_job reports progress, then its result');
    shell(`closeout call ${url} batch_job --args '{"items":4,"stepMs":300}'`);
    const batch = await call(client, 'batch_job', { items: 4, stepMs: 300 });
    if (!isTaskHandle(batch)) throw new CliError('batch_job did not create a task');
    expect('batch_job completes', (await follow(batch)).outcome === 'completed');

    heading(3, 'An input answered: approve_deploy asks for approval through elicitation');
    shell(`closeout call ${url} approve_deploy --arg env=staging`);
    if (!interactive) {
      out.line(
        c.dim(
          `   (unattended: the answer is ${flags.decline ? 'decline (--decline)' : 'accept with the form’s defaults (--decline declines)'})`,
        ),
      );
    }
    const deploy = await call(client, 'approve_deploy', { env: 'staging' });
    if (!isTaskHandle(deploy)) throw new CliError('approve_deploy did not create a task');
    expect('approve_deploy closes out', (await follow(deploy)).outcome === 'completed');

    heading(4, 'A cancel: export_report is cancelled while it runs (cooperative: the work stops when it notices)');
    shell(`closeout call ${url} export_report --args '{"pages":20,"pageMs":300}'   # then: closeout cancel TASK_ID`);
    const report = await call(client, 'export_report', { pages: 20, pageMs: 300 });
    if (!isTaskHandle(report)) throw new CliError('export_report did not create a task');
    const cancelled = await follow(report, async (handle) => {
      await sleep(1_200);
      out.line(`   ${c.magenta('cancel requested')} ${c.dim('(tasks/cancel sent and acknowledged)')}`);
      await handle.cancel();
    });
    expect('export_report ends cancelled', cancelled.outcome === 'cancelled');

    heading(5, 'A detach, then a resume from a fresh process');
    shell(`closeout call ${url} batch_job --args '{"items":6,"stepMs":300}'   # then Ctrl-C: it detaches`);
    const long = await call(client, 'batch_job', { items: 6, stepMs: 300 });
    if (!isTaskHandle(long)) throw new CliError('batch_job did not create a task');
    const detached = await follow(long, async (handle) => {
      await sleep(900);
      await handle.detach();
    });
    expect('the batch_job is detached', detached.outcome === 'detached');
    shell(`closeout resume ${long.taskId}   # a new process, reading the same ledger`);
    const code = await runFresh(['resume', long.taskId, '--ledger', ledgerPath], (line) => out.line(`   │ ${line}`));
    expect('the fresh process closes the task out (exit 0)', code === 0);

    heading(6, 'The ledger: every handle, how it closed out, and when it was last polled');
    shell(`closeout ls --all --ledger ${ledgerPath}`);
    for (const line of recordTable(await session.ledger.list(), c, session.ledger.now())) out.line(`   ${line}`);
    // the hint names a file that is still there afterwards only with --keep
    if (flags.keep)
      out.line(c.dim(`   closeout show TASK_ID --ledger ${ledgerPath} prints one record with its timeline`));
  } finally {
    current.stop();
    await session.close();
    await serving.close();
    await store.close();
    if (flags.keep) {
      out.line(c.dim(`\nkept ${dir} (server.db, ledger.db); see both in a web page with`));
      out.line(c.dim(`closeout console --ledger ${ledgerPath} --store ${storePath}`));
    } else rmSync(dir, { recursive: true, force: true });
  }
  if (problems.length > 0) throw new CliError(`the demo did not go as expected: ${problems.join('; ')}`);
  out.line(`\n${c.green('✔ demo finished')}: try it on your own server with \`closeout serve\` and \`closeout call\``);
}

/** Run `closeout ARGS` as a new process (a fresh client, nothing shared but the ledger file), line by line. */
function runFresh(args: string[], onLine: (line: string) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI_PATH, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    });
    let buffered = '';
    const feed = (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) onLine(serverBlock(line));
    };
    child.stdout.on('data', feed);
    child.stderr.on('data', feed);
    child.once('error', reject);
    child.once('close', (code) => {
      if (buffered) onLine(serverBlock(buffered));
      resolve(code ?? EXIT.usage);
    });
  });
}
