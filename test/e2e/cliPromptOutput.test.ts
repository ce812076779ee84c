// A prompt owns the terminal: while `closeout resume` asks a person to approve one task, a
// second task that closes out meanwhile must not print into the open prompt; its close-out line follows once the
// prompt is answered. Run in a real pseudo-terminal (util-linux `script`), as a person would see it.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/ledger/index.js';
import { runCli } from '../support/cli.js';
import { CLI, type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-cli-prompt-'));
const ledgerPath = join(dir, 'ledger.db');
let server: ServeProcess;

beforeAll(async () => {
  server = await startServe(['--store', join(dir, 'server.db')]);
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

// eslint-disable-next-line no-control-regex
const ESCAPES = /\u001b\[[0-9;?]*[A-Za-z]/g;

/** `closeout ARGS` on a pseudo-terminal: what the terminal showed (escape codes removed), and keys to type. */
function onTerminal(args: string[]): { child: ChildProcess; screen: () => string; type: (keys: string) => void } {
  const command = [process.execPath, CLI, ...args].map((part) => `'${part.replace(/'/g, `'\\''`)}'`).join(' ');
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, CLOSEOUT_LEDGER: ledgerPath, NO_COLOR: '1', TERM: 'xterm', COLUMNS: '200' },
  });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  return { child, screen: () => text.replace(ESCAPES, ''), type: (keys) => void child.stdin!.write(keys) };
}

describe('closeout resume with a prompt open', () => {
  it('holds another task’s close-out line until the prompt is answered', { timeout: 90_000 }, async () => {
    const detach = async (tool: string, args: string[]) => {
      const run = await runCli(['call', server.url, tool, ...args, '--detach'], { ledger: ledgerPath });
      expect(run.code, run.stderr).toBe(0);
      return run.stdout.trim();
    };
    await detach('approve_deploy', ['--arg', 'env=staging']);
    const batchTaskId = await detach('batch_job', ['--arg', 'items=10', '--arg', 'stepMs=800']);

    const terminal = onTerminal(['resume']);
    try {
      const shows = (what: string, timeoutMs = 15_000) =>
        waitFor(`"${what}" on the terminal`, () => (terminal.screen().includes(what) ? true : undefined), timeoutMs);
      await shows('Your answer', 30_000);
      // the batch job (8 s) is still running when the prompt opens, or this test proves nothing
      expect(terminal.screen()).not.toMatch(/completed\s+batch_job/);
      // the batch job closes out while the prompt is open: the ledger has it terminal (this process committed it)
      const ledger = new SqliteLedger(ledgerPath);
      try {
        await waitFor(
          'the batch job closed out in the ledger',
          async () => {
            const records = await ledger.list();
            const batch = records.find((record) => record.taskId === batchTaskId);
            return batch?.localState === 'terminal' ? true : undefined;
          },
          30_000,
          100,
        );
      } finally {
        await ledger.dispose();
      }
      // give a close-out line every chance to be drawn into the prompt
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const whilePrompting = terminal.screen();
      expect(whilePrompting).not.toMatch(/completed\s+batch_job/);

      terminal.type('\r'); // accept: fill in the form
      await shows('Approve');
      terminal.type('\r'); // approve: yes (the default)
      await shows('Note');
      terminal.type('\r'); // no note
      const screen = await waitFor(
        'both close-out lines',
        () => {
          const text = terminal.screen();
          return /completed\s+batch_job/.test(text) && /completed\s+approve_deploy/.test(text) ? text : undefined;
        },
        30_000,
      );
      // the held line comes after the prompt ended, never inside it
      expect(screen.search(/completed\s+batch_job/)).toBeGreaterThan(screen.lastIndexOf('Note'));
    } finally {
      if (terminal.child.exitCode === null) {
        terminal.child.kill('SIGKILL');
        await once(terminal.child, 'close');
      }
    }
  });
});
