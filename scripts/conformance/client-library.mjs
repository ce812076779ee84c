/* global console, process -- Node globals: the lint config declares none for plain .mjs files */
/**
 * Conformance client adapter on closeout/client (run by scripts/conformance.sh through the suite's `client` command):
 * connects a TaskClient to the mock server's URL (the last argument), lists its tools, and makes the scenario's calls
 * through `TaskClient.callTool`, following any task to its end. Answers every input request (MRTR rounds included)
 * with an accepted, empty form, as a person who takes the defaults would.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { connectHttpTaskClient, isTaskHandle } from '../../dist/client/index.js';
import { planCalls, scenarioContext } from './clientPlan.mjs';

const url = process.argv.at(-1);
const scenario = process.env['MCP_CONFORMANCE_SCENARIO'] ?? '';
const dir = mkdtempSync(join(tmpdir(), 'closeout-conformance-client-'));
let failed = false;
try {
  const client = await connectHttpTaskClient(url, {
    ledger: join(dir, 'ledger.db'),
    requestTimeoutMs: 20_000,
    inputHandlers: {
      elicitation: () => ({ action: 'accept', content: {} }),
      roots: () => ({ roots: [] }),
    },
  });
  try {
    const { tools } = await client.client.listTools();
    for (const call of planCalls(scenario, tools, scenarioContext())) {
      try {
        const answer = await client.callTool(call.name, call.arguments);
        const result = isTaskHandle(answer) ? await answer.result() : answer;
        console.error(`${call.name}: ${JSON.stringify(result).slice(0, 300)}`);
      } catch (error) {
        // a tool the scenario expects to fail (an invalid header declaration) fails only that call
        console.error(`${call.name} failed: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
  } finally {
    await client.close();
  }
} catch (error) {
  failed = true;
  console.error(`closeout conformance client: ${error instanceof Error ? error.stack : String(error)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = failed ? 1 : 0;
