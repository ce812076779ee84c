// No Closeout process aborts on a Node line `engines` admits: on Node 24 (the npm registry's `node` package,
// better-sqlite3 compiled against its own headers) `closeout demo`, whose resume runs in a fresh process, succeeds run
// after run, and so does a churn of every way this package makes and drops the driver's objects. A driver object left
// to the garbage collector aborted such a process in most runs (src/shared/sqlite/sqliteDriver.ts). scripts/node-matrix.sh does the
// work (.ci/run runs it on every line first, so here the Node and the build come from its cache).
import { execFile } from 'node:child_process';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const RUNS = 4;

interface Outcome {
  code: number;
  output: string;
}

function nodeMatrix(args: string[]): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(
      'bash',
      [join(ROOT, 'scripts', 'node-matrix.sh'), ...args],
      // the first run on a machine installs Node 24 and compiles the driver (a minute and a half on two cores)
      { cwd: ROOT, timeout: 14 * 60_000, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, output: `${stdout}${stderr}` });
      },
    );
  });
}

describe('Node 24', () => {
  it(
    `runs closeout demo ${RUNS} times in a row and the driver churn without an abort`,
    async (context) => {
      const { code, output } = await nodeMatrix(['--runs', String(RUNS), '24']);
      if (code === 3) {
        // the registry cannot be reached, or the machine cannot compile: nothing ran
        context.skip(`Node 24 could not be installed, or better-sqlite3 not built for it:\n${output}`);
      }
      expect(output).not.toContain('Assertion failed');
      expect(output).toMatch(new RegExp(`closeout demo passed ${RUNS} of ${RUNS} runs; the driver churn passed`));
      expect(code, output).toBe(0);
    },
    15 * 60_000,
  );
});
