/**
 * Importing the client loads only what a client on the default (SQLite) ledger uses: the PostgreSQL driver is loaded
 * when a PostgreSQL ledger is opened. Every process that resumes or runs a `closeout` command pays for what the import
 * loads before it does anything (bench/RESULTS.md: `pg` was about a sixth of the client's import time).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { expect, it } from 'vitest';

const run = promisify(execFile);
const ENTRY = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));

/** The CommonJS modules (pg is one) a fresh process has loaded after `script`, as paths under node_modules. */
async function packagesLoadedBy(script: string): Promise<string[]> {
  const { stdout } = await run(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { createRequire } from 'node:module';
       const client = await import(${JSON.stringify(ENTRY)});
       ${script}
       const loaded = Object.keys(createRequire(import.meta.url).cache);
       console.log(JSON.stringify([...new Set(loaded.map((p) => /node_modules\\/((@[^/]+\\/)?[^/]+)/.exec(p)?.[1]).filter(Boolean))]));`,
    ],
    { timeout: 60_000 },
  );
  return JSON.parse(stdout) as string[];
}

it('does not load the PostgreSQL driver until a PostgreSQL ledger is opened', async () => {
  expect(await packagesLoadedBy('')).not.toContain('pg');
  // the same probe sees it once a PostgreSQL ledger is opened (here: refused, nothing listens on port 1)
  const opened = await packagesLoadedBy(
    `await client.PostgresLedger.open('postgres://nobody@127.0.0.1:1/none', { connectionTimeoutMs: 500 }).catch(() => undefined);`,
  );
  expect(opened).toContain('pg');
}, 120_000);
