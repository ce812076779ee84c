/**
 * Importing the client loads only what a client on the default (SQLite) ledger uses: the PostgreSQL driver is loaded
 * when a PostgreSQL ledger is opened. Every process that resumes or runs a `closeout` command pays for what the import
 * loads before it does anything (bench/RESULTS.md: `pg` was about a sixth of the client's import time).
 */
import { fileURLToPath } from 'node:url';

import { expect, it } from 'vitest';

import { packagesLoadedBy } from '../support/packagesLoaded.js';

const ENTRY = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));

it('does not load the PostgreSQL driver until a PostgreSQL ledger is opened', async () => {
  expect(await packagesLoadedBy(ENTRY, '')).not.toContain('pg');
  // the same probe sees it once a PostgreSQL ledger is opened (here: refused, nothing listens on port 1)
  const opened = await packagesLoadedBy(
    ENTRY,
    `await entryModule.PostgresLedger.open('postgres://nobody@127.0.0.1:1/none', { connectionTimeoutMs: 500 }).catch(() => undefined);`,
  );
  expect(opened).toContain('pg');
}, 120_000);
