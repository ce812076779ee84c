// Invariant: the store location `closeout serve` logs carries no password in any form of connection string pg parses
// (test/e2e/serveStoreRedaction.test.ts proves it on a real database for the forms that can connect there).
import { describe, expect, it } from 'vitest';

import { describeStoreLocation } from '../../src/cli/storeLocation.js';

describe('describeStoreLocation', () => {
  it.each([
    ['postgres://alice:hunter2@db.example:5432/tasks', 'postgres://alice@db.example:5432/tasks (password hidden)'],
    ['POSTGRESQL://alice:hunter2@db.example/tasks', 'postgres://alice@db.example/tasks (password hidden)'],
    ['postgres://alice@db.example/tasks?password=hunter2', 'postgres://alice@db.example/tasks (password hidden)'],
    [
      'postgres://alice@db.example/tasks?sslmode=disable&password=hunter2',
      'postgres://alice@db.example/tasks (password hidden)',
    ],
    ['postgres://:hunter2@db.example/tasks', 'postgres://db.example/tasks (password hidden)'],
    ['postgres://alice:hunter2@[::1]:5433/tasks', 'postgres://alice@[::1]:5433/tasks (password hidden)'],
    ['postgres://alice:hun@ter2@db.example/tasks', 'postgres://alice@db.example/tasks (password hidden)'],
    ['postgres://alice:hunter%32@db.example/tasks', 'postgres://alice@db.example/tasks (password hidden)'],
    ['postgres:///tasks?host=/run/pg&user=alice&password=hunter2', 'postgres://alice@/run/pg/tasks (password hidden)'],
    ['postgres://alice@db.example/tasks', 'postgres://alice@db.example/tasks'],
  ])('%s', (location, logged) => {
    const line = describeStoreLocation(location);
    expect(line).toBe(logged);
    expect(line).not.toMatch(/hunter|hun@|ter2|%32/);
  });

  it('keeps a SQLite path as it is', () => {
    expect(describeStoreLocation('./closeout-server.db')).toBe('./closeout-server.db');
  });
});
