/**
 * `closeout bridge URL`: a stdio MCP server for hosts without the Tasks extension, calling URL's tools through a
 * durable ledger (src/bridge/bridge.ts). stdout carries JSON-RPC only; the bridge reports on stderr.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';

import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';

import { parseUrl } from './arguments.js';
import type { TokenFlags } from './commonOptions.js';
import { addTokenOption } from './commonOptions.js';

interface BridgeFlags extends TokenFlags {
  ledger?: string;
  wait: number;
  dedupe: boolean;
}

export function registerBridge(program: Command): void {
  const command = program
    .command('bridge')
    .description(
      'Serve URL’s tools over stdio to a host without Tasks: a long call answers with its task id, closeout_wait gets the result',
    )
    .argument('<url>', 'the upstream server’s MCP endpoint, e.g. https://tools.example.com/mcp', parseUrl)
    .option(
      '--ledger <path>',
      'the bridge’s ledger (SQLite file or postgres:// URL)',
      join(homedir(), '.closeout', 'bridge.db'),
    )
    .option('--wait <seconds>', 'how long a call waits for its task before answering with its id', parseSeconds, 55)
    .option('--no-dedupe', 'a host retrying a call (same tool and arguments, within 10 minutes) gets a new task');
  addTokenOption(command);
  command.action(async (url: string, flags: BridgeFlags) => {
    const { startBridge } = await import('../bridge/bridge.js');
    const bridge = await startBridge({
      upstream: url,
      ledger: flags.ledger!,
      waitMs: flags.wait * 1000,
      ...(flags.dedupe ? {} : { dedupeWindowMs: 0 }),
      token: flags.token ?? process.env['CLOSEOUT_TOKEN'],
    });
    process.stderr.write(`closeout bridge: ${url} over stdio, ledger ${flags.ledger}\n`);
    const stop = async () => {
      await bridge.close().catch(() => undefined);
      process.exit(0);
    };
    process.once('SIGTERM', () => void stop());
    process.once('SIGINT', () => void stop());
    await bridge.closed;
    await stop();
  });
}

function parseSeconds(value: string): number {
  const seconds = Number(value);
  if (!Number.isFinite(seconds) || seconds < 0) throw new InvalidArgumentError('expected a number of seconds, e.g. 55');
  return seconds;
}
