#!/usr/bin/env node
/**
 * The `closeout` command. Each sub-command lives in its own file; this one wires them and maps failures to one line
 * and an exit code.
 */
import { Command, CommanderError } from 'commander';

import { CliError } from './cliError.js';
import { watchOutput } from './terminal/closedOutput.js';
import { serverLine } from './terminal/serverText.js';

// `closeout ... | head -1`: a closed stdout ends the command quietly, never with an EPIPE stack trace
watchOutput();

/** Each command in its module, loaded on demand: `ls` need not load the server SDK, nor `serve` the prompts. */
const COMMANDS: Record<string, () => Promise<(program: Command) => void>> = {
  serve: async () => (await import('./commands/serve.js')).registerServe,
  doctor: async () => {
    const [{ registerDoctor }, { ledgerRoundTrip }] = await Promise.all([
      import('./commands/doctor.js'),
      import('./commands/doctorResume.js'),
    ]);
    return (program) => registerDoctor(program, ledgerRoundTrip);
  },
  call: async () => (await import('./commands/call.js')).registerCall,
  tools: async () => (await import('./commands/tools.js')).registerTools,
  ls: async () => (await import('./commands/ls.js')).registerLs,
  show: async () => (await import('./commands/show.js')).registerShow,
  resume: async () => (await import('./commands/resume.js')).registerResume,
  answer: async () => (await import('./commands/answer.js')).registerAnswer,
  resubmit: async () => (await import('./commands/resubmit.js')).registerResubmit,
  cancel: async () => (await import('./commands/cancel.js')).registerCancel,
  demo: async () => (await import('./commands/demo.js')).registerDemo,
  bridge: async () => (await import('./commands/bridge.js')).registerBridge,
  tasks: async () => (await import('./commands/tasks.js')).registerTasks,
  task: async () => (await import('./commands/taskShow.js')).registerTaskShow,
  console: async () => (await import('./commands/console.js')).registerConsole,
};

// stdout carries the command's own output (with --json, JSON only): whatever a library logs goes to stderr
for (const method of ['log', 'info', 'debug', 'dir', 'table'] as const) console[method] = console.error;

const program = new Command()
  .name('closeout')
  .description('Durable MCP Tasks: serve task tools, call them, and close out every result')
  .version('0.1.0')
  // `-V`/`--version` only before the command: after it, `-V…` is a taskId (`closeout cancel -Vx3…`)
  .enablePositionalOptions()
  // bad input is one line that says what is wrong and what to do, in the same voice as every other failure
  .configureOutput({ outputError: (message, write) => write(message.replace(/^error: /, 'closeout: ')) })
  .exitOverride();

// the command being run, or all of them for help and for a name that is none of them
const named = process.argv[2];
const wanted =
  named === '--version' || named === '-V'
    ? []
    : named !== undefined && Object.hasOwn(COMMANDS, named)
      ? [named]
      : Object.keys(COMMANDS);
for (const register of await Promise.all(wanted.map((name) => COMMANDS[name]!()))) register(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode;
  } else if (error instanceof CliError) {
    // a message may quote a server (an HTTP error body, a JSON-RPC error): one line of words, nothing a terminal acts on
    if (error.message) console.error(`closeout: ${serverLine(error.message)}`);
    process.exitCode = error.exitCode;
  } else {
    console.error(`closeout: ${serverLine(error instanceof Error ? error.message : String(error))}`);
    process.exitCode = 1;
  }
}
