/**
 * Importing the server loads only what a server on the default (SQLite) store uses: the PostgreSQL driver is loaded
 * when a PostgreSQL task store is made, as on the client when a PostgreSQL ledger is opened
 * (test/client/importCost.test.ts).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { expect, it } from 'vitest';

const run = promisify(execFile);
const ENTRY = fileURLToPath(new URL('../../dist/server/index.js', import.meta.url));

/** The CommonJS packages (pg is one) a fresh process has loaded after importing the server and running `script`. */
async function packagesLoadedBy(script: string): Promise<string[]> {
  const { stdout } = await run(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { createRequire } from 'node:module';
       const server = await import(${JSON.stringify(ENTRY)});
       ${script}
       const loaded = Object.keys(createRequire(import.meta.url).cache);
       console.log(JSON.stringify([...new Set(loaded.map((p) => /node_modules\\/((@[^/]+\\/)?[^/]+)/.exec(p)?.[1]).filter(Boolean))]));`,
    ],
    { timeout: 60_000 },
  );
  return JSON.parse(stdout) as string[];
}

it('does not load the PostgreSQL driver until a PostgreSQL task store is made', async () => {
  // a SQLite store is opened and closed: still no driver
  const sqlite = await packagesLoadedBy(
    `const { mkdtempSync, rmSync } = await import('node:fs');
     const dir = mkdtempSync((await import('node:os')).tmpdir() + '/closeout-import-');
     const store = await server.openTaskStore(dir + '/tasks.db');
     await store.close();
     rmSync(dir, { recursive: true, force: true });`,
  );
  expect(sqlite).toContain('better-sqlite3');
  expect(sqlite).not.toContain('pg');
  // the same probe sees it once a PostgreSQL store is opened (here: refused, nothing listens on port 1)
  const opened = await packagesLoadedBy(
    `await server.openTaskStore('postgres://nobody@127.0.0.1:1/none').catch(() => undefined);`,
  );
  expect(opened).toContain('pg');
}, 120_000);
