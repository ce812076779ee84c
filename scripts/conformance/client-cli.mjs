/* global console, process -- Node globals: the lint config declares none for plain .mjs files */
/**
 * Conformance client adapter on the `closeout` command (run by scripts/conformance.sh through the suite's `client`
 * command): every call of the scenario is one `closeout call URL TOOL --args JSON --accept {} --json` process, on a
 * throwaway ledger. Which calls to make is decided from the server's tool list, read once through closeout/client
 * (the CLI has no command that prints tool schemas); the calls themselves, with their headers, MRTR rounds and
 * tasks, are the CLI's own. Fails when a call's stdout is not the documented JSON.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { connectHttpTaskClient } from '../../dist/client/index.js';
import { planCalls, scenarioContext } from './clientPlan.mjs';

const CLI = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'dist', 'cli', 'main.js');
const url = process.argv.at(-1);
const scenario = process.env['MCP_CONFORMANCE_SCENARIO'] ?? '';
const dir = mkdtempSync(join(tmpdir(), 'closeout-conformance-cli-'));
// every call shares the time the suite gives this adapter (scripts/conformance.sh: --timeout 240000), less a margin:
// a fixed 25 s per call killed a `closeout call` on a loaded machine, which the suite reported as a tool never called
const deadline = Date.now() + 225_000;
let failed = false;
try {
  const lister = await connectHttpTaskClient(url, { ledger: join(dir, 'list.db') });
  let tools;
  try {
    ({ tools } = await lister.client.listTools());
  } finally {
    await lister.close();
  }
  for (const call of planCalls(scenario, tools, scenarioContext())) {
    const args = ['call', url, call.name, '--args', JSON.stringify(call.arguments), '--accept', '{}', '--json'];
    const run = spawnSync(process.execPath, [CLI, ...args], {
      env: { ...process.env, CLOSEOUT_LEDGER: join(dir, 'ledger.db') },
      encoding: 'utf8',
      timeout: Math.max(5_000, deadline - Date.now()),
    });
    console.error(`closeout call ${call.name}: exit ${run.status}\n${run.stderr}`);
    if (run.status === null) {
      failed = true;
      console.error(`closeout call ${call.name} did not finish in the adapter's time (${run.signal ?? run.error})`);
    }
    for (const line of run.stdout.split('\n').filter((l) => l.length > 0)) {
      try {
        JSON.parse(line);
      } catch {
        failed = true;
        console.error(`closeout call ${call.name} --json wrote a line that is not JSON: ${line}`);
      }
    }
  }
} catch (error) {
  failed = true;
  console.error(`closeout conformance CLI client: ${error instanceof Error ? error.stack : String(error)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = failed ? 1 : 0;
