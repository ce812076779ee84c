/**
 * closeout/console: the web console over a client ledger and a server store (docs/cli.md, "The console"), as a
 * `node:http` request handler. Named exports only: this is the entry point's complete public surface.
 */
export type { ConsoleHandler, ConsoleOptions } from './consoleHandler.js';
export { createConsoleHandler } from './consoleHandler.js';
