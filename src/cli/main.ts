#!/usr/bin/env node
/**
 * The `closeout` command. Each sub-command lives in its own file; this one wires them and maps failures to one line
 * and an exit code.
 */
import { Command, CommanderError } from 'commander';

import { registerAnswer } from './answer.js';
import { registerCall } from './call.js';
import { registerCancel } from './cancel.js';
import { CliError } from './cliError.js';
import { registerDemo } from './demo.js';
import { registerDoctor } from './doctor.js';
import { ledgerRoundTrip } from './doctorResume.js';
import { registerLs } from './ls.js';
import { registerResume } from './resume.js';
import { registerServe } from './serve.js';
import { registerShow } from './show.js';

const program = new Command()
  .name('closeout')
  .description('Durable MCP Tasks: serve task tools, call them, and close out every result')
  .version('0.1.0')
  // bad input is one line that says what is wrong and what to do, in the same voice as every other failure
  .configureOutput({ outputError: (message, write) => write(message.replace(/^error: /, 'closeout: ')) })
  .exitOverride();

registerServe(program);
registerDoctor(program, ledgerRoundTrip);
registerCall(program);
registerLs(program);
registerShow(program);
registerResume(program);
registerAnswer(program);
registerCancel(program);
registerDemo(program);

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
