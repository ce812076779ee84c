#!/usr/bin/env node
/**
 * The `closeout` command. Each sub-command lives in its own file; this one wires them and maps failures to one line
 * and an exit code.
 */
import { Command, CommanderError } from 'commander';

import { CliError } from './cliError.js';
import { registerDoctor } from './doctor.js';
import { registerServe } from './serve.js';

const program = new Command()
  .name('closeout')
  .description('Durable MCP Tasks: serve task tools, call them, and close out every result')
  .version('0.1.0')
  .showHelpAfterError('(run with --help for usage)')
  .exitOverride();

registerServe(program);
registerDoctor(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode;
  } else if (error instanceof CliError) {
    if (error.message) console.error(`closeout: ${error.message}`);
    process.exitCode = error.exitCode;
  } else {
    console.error(`closeout: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  }
}
