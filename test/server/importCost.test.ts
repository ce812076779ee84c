/**
 * Importing the server loads only what a server on the default (SQLite) store uses: the PostgreSQL driver is loaded
 * when a PostgreSQL task store is made, as on the client when a PostgreSQL ledger is opened
 * (test/client/importCost.test.ts).
 */
import { fileURLToPath } from 'node:url';

import { expect, it } from 'vitest';

import { packagesLoadedBy } from '../support/packagesLoaded.js';

const ENTRY = fileURLToPath(new URL('../../dist/server/index.js', import.meta.url));

it('does not load the PostgreSQL driver until a PostgreSQL task store is made', async () => {
  // a SQLite store is opened and closed: still no driver
  const sqlite = await packagesLoadedBy(
    ENTRY,
    `const { mkdtempSync, rmSync } = await import('node:fs');
     const dir = mkdtempSync((await import('node:os')).tmpdir() + '/closeout-import-');
     const store = await entryModule.openTaskStore(dir + '/tasks.db');
     await store.close();
     rmSync(dir, { recursive: true, force: true });`,
  );
  expect(sqlite).toContain('better-sqlite3');
  expect(sqlite).not.toContain('pg');
  // the same probe sees it once a PostgreSQL store is opened (here: refused, nothing listens on port 1)
  const opened = await packagesLoadedBy(
    ENTRY,
    `await entryModule.openTaskStore('postgres://nobody@127.0.0.1:1/none').catch(() => undefined);`,
  );
  expect(opened).toContain('pg');
}, 120_000);
