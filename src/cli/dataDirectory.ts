/**
 * Closeout's files in the user's home directory (`~/.closeout`): the CLI's ledger, the bridge's ledger, a stdio
 * server's store. Hosts start servers in whatever working directory they like, so no default lives in the working one.
 */
import { mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

/** The path of a file of Closeout's in the user's home directory. */
export function dataFilePath(name: string): string {
  return join(homedir(), '.closeout', name);
}

/** Create the folder of a default file when it is missing, owner-only (0700): it holds task results and answers. */
export function makeDataDirectory(path: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
}
