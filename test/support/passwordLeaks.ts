/**
 * For the tests that keep a connection string's password out of every error: what an error shows when printed,
 * logged or inspected, and connection strings that fail in the three ways a driver may quote what it was given.
 */
import { inspect } from 'node:util';

import { freePort } from './postgres.js';

/** All an error shows when printed, logged or inspected, causes included. */
export function everythingShown(error: unknown): string {
  return `${String(error)}\n${(error as Error).stack ?? ''}\n${inspect(error, { depth: 10 })}`;
}

/**
 * A wrong password, a port where nothing listens, a database that does not exist, each with the secret that must
 * not show in its failure.
 */
export async function failingConnections(connectionString: string): Promise<Array<readonly [string, string]>> {
  const password = new URL(connectionString).password;
  const wrong = new URL(connectionString);
  wrong.password = 'Wr0ngPassw0rd-do-not-show';
  const nowhere = new URL(connectionString);
  nowhere.port = String(await freePort());
  const missing = new URL(connectionString);
  missing.pathname = '/no_such_database';
  return [
    [wrong.href, 'Wr0ngPassw0rd-do-not-show'],
    [nowhere.href, password],
    [missing.href, password],
  ];
}
