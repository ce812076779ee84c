/**
 * Which npm packages a fresh Node process has loaded through CommonJS (pg and better-sqlite3 are such packages) after
 * importing `entry` (bound as `entryModule` in `script`) and running `script`: for the import-cost tests of both halves.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export async function packagesLoadedBy(entry: string, script: string): Promise<string[]> {
  const { stdout } = await run(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { createRequire } from 'node:module';
       const entryModule = await import(${JSON.stringify(entry)});
       ${script}
       const loaded = Object.keys(createRequire(import.meta.url).cache);
       console.log(JSON.stringify([...new Set(loaded.map((p) => /node_modules\\/((@[^/]+\\/)?[^/]+)/.exec(p)?.[1]).filter(Boolean))]));`,
    ],
    { timeout: 60_000 },
  );
  return JSON.parse(stdout) as string[];
}
