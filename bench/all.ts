/**
 * `npm run bench`: every benchmark, one after the other, each in a process of its own so none inherits another's
 * heap or timers. Arguments are passed to each (`npm run bench -- --smoke`); the first failure stops the run.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const BENCHMARKS = [
  'serverOverhead',
  'serverRecovery',
  'clientFollow',
  'clientResume',
  'ledgerNotes',
  'walGrowth',
  'stepCost',
  'runningTasks',
  'storeGrowth',
  'purgeRate',
  'pushLateness',
  'pushServerCost',
  'postgresCreate',
  'clientFleet',
] as const;

for (const name of BENCHMARKS) {
  const script = fileURLToPath(new URL(`${name}.js`, import.meta.url));
  const { status, signal } = spawnSync(process.execPath, [script, ...process.argv.slice(2)], { stdio: 'inherit' });
  if (status !== 0) {
    console.error(`bench: ${name} ${signal ? `was killed by ${signal}` : `exited with ${status}`}`);
    process.exit(status ?? 1);
  }
  console.log('');
}
