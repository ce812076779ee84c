/**
 * `closeout bridge URL` (or a stdio upstream: `closeout bridge --stdio-command 'COMMAND LINE'`, or
 * `closeout bridge -- COMMAND [ARG...]`): a stdio MCP server for hosts
 * without the Tasks extension, calling the upstream's tools through a durable ledger (src/bridge/bridge.ts). stdout
 * carries JSON-RPC only; the bridge and a stdio upstream report on stderr.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { split as splitShellWords } from 'shlex';

import type { StdioUpstream } from '../../bridge/bridge.js';
import { parseUrl } from '../arguments.js';
import { CliError } from '../cliError.js';
import type { TokenFlags } from '../commonOptions.js';
import { addTokenOption } from '../commonOptions.js';
import { dataFilePath, makeDataDirectory } from '../dataDirectory.js';

interface BridgeFlags extends TokenFlags {
  ledger?: string;
  stdioCommand?: string;
  wait: number;
  dedupe: boolean;
}

export function registerBridge(program: Command): void {
  const command = program
    .command('bridge')
    .description(
      'Serve an upstream server’s tools over stdio to a host without Tasks: a long call answers with its task id, closeout_wait gets the result',
    )
    .usage("[options] URL | [options] --stdio-command 'COMMAND LINE' | [options] -- COMMAND [ARG...]")
    .argument(
      '[upstream...]',
      'the upstream server: its MCP endpoint (https://tools.example.com/mcp), or after -- the command that starts it over stdio',
    )
    .option(
      '--stdio-command <command line>',
      'the command that starts the upstream over stdio, as one string split into words as a POSIX shell would (quotes, backslashes; no variables, ~, pipes or redirections: no shell runs it)',
    )
    .option('--ledger <path>', 'the bridge’s ledger (SQLite file or postgres:// URL)', dataFilePath('bridge.db'))
    .option('--wait <seconds>', 'how long a call waits for its task before answering with its id', parseSeconds, 55)
    .option('--no-dedupe', 'a host retrying a call (same tool and arguments, within 10 minutes) gets a new task');
  addTokenOption(command);
  command.action(async (words: string[], flags: BridgeFlags, self: Command) => {
    const upstream =
      flags.stdioCommand === undefined ? parseUpstream(words) : parseStdioCommand(flags.stdioCommand, words);
    if (typeof upstream !== 'string' && flags.token !== undefined) {
      throw new CliError('--token is for an upstream URL; a stdio upstream gets its secrets from its own environment');
    }
    const shown = typeof upstream === 'string' ? upstream : [upstream.command, ...(upstream.args ?? [])].join(' ');
    // the default ledger's folder may not exist yet on a fresh machine
    if (self.getOptionValueSource('ledger') === 'default') makeDataDirectory(flags.ledger!);
    const { startBridge } = await import('../../bridge/bridge.js');
    const bridge = await startBridge({
      upstream,
      ledger: flags.ledger!,
      waitMs: flags.wait * 1000,
      ...(flags.dedupe ? {} : { dedupeWindowMs: 0 }),
      token: flags.token ?? process.env['CLOSEOUT_TOKEN'],
    });
    process.stderr.write(`closeout bridge: ${shown} over stdio, ledger ${flags.ledger}\n`);
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

/**
 * One word with `://` is the upstream's URL (http or https); anything else is the command of a stdio upstream and its
 * arguments (after `--`, so that its options are not read as the bridge's).
 */
function parseUpstream(words: string[]): string | StdioUpstream {
  const [first, ...rest] = words;
  if (first === undefined) {
    throw new CliError("expected the upstream server: a URL, --stdio-command 'COMMAND LINE', or -- and a command");
  }
  if (words.length === 1 && first.includes('://')) {
    try {
      return parseUrl(first);
    } catch (error) {
      throw new CliError(`bridge: ${(error as Error).message}`);
    }
  }
  return { command: first, args: rest };
}

/** `--stdio-command`'s command line in words, as a POSIX shell splits it; the upstream is given this way or another. */
function parseStdioCommand(line: string, words: string[]): StdioUpstream {
  if (words.length > 0) {
    throw new CliError(`--stdio-command names the upstream already: remove ${JSON.stringify(words.join(' '))}`);
  }
  let split: string[];
  try {
    split = splitShellWords(line);
  } catch (error) {
    throw new CliError(`--stdio-command: ${(error as Error).message} in ${JSON.stringify(line)}`);
  }
  const [command, ...args] = split;
  if (command === undefined)
    throw new CliError('--stdio-command: expected a command, e.g. "npx closeout serve --stdio"');
  return { command, args };
}
