/**
 * The PostgreSQL driver (`pg`), loaded on first use rather than on import: a process on SQLite (the default task store,
 * the default ledger) never pays for loading it. `pg` is CommonJS, so it loads synchronously, and a store made with
 * `new` can load it in its constructor.
 */
import { createRequire } from 'node:module';

import type pg from 'pg';

let driver: typeof pg | undefined;

/** The `pg` module, loaded the first time it is asked for. */
export function loadPg(): typeof pg {
  driver ??= createRequire(import.meta.url)('pg') as typeof pg;
  return driver;
}
