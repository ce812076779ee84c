/** Options several commands share, declared once so their names and help read the same everywhere. */
import type { Command } from 'commander';

import { parseJsonObject } from './arguments.js';
import { LEDGER_ENV } from './ledgerFile.js';

export interface LedgerFlags {
  ledger?: string | undefined;
}

export interface JsonFlags {
  json?: boolean | undefined;
}

export function addLedgerOption(command: Command): Command {
  return command.option(
    '--ledger <path>',
    `the ledger file, or a postgres:// URL for a ledger a fleet shares (default: $${LEDGER_ENV}, else ~/.closeout/ledger.db)`,
  );
}

export interface TokenFlags {
  token?: string | undefined;
}

/** A bearer token for the server the command names; it goes to that server only and is never stored. */
export function addTokenOption(command: Command): Command {
  return command.option('--token <token>', 'bearer token for the server (default: $CLOSEOUT_TOKEN); never stored');
}

export function addJsonOption(command: Command, what: string): Command {
  return command.option('--json', what);
}

/**
 * The taskId operand. Task ids are often base64url and may begin with '-': such a token is taken as the taskId rather
 * than refused as an unknown option (a mistyped option then shows up as an unknown taskId or an extra argument).
 */
export function addTaskIdArgument(command: Command, description: string, optional = false): Command {
  return command.argument(optional ? '[taskId]' : '<taskId>', description).allowUnknownOption();
}

/** How a command answers elicitations when it cannot (or should not) ask at the terminal. */
export function addAnswerOptions(command: Command): Command {
  return command
    .option(
      '--accept <json>',
      'answer elicitations: accept, with this content (schema defaults fill the rest)',
      parseJsonObject,
    )
    .option('--decline', 'answer elicitations: decline')
    .option('--dismiss', 'answer elicitations: cancel (dismissed without a choice)');
}
