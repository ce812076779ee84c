/**
 * The first half of the adapters' crash tests: an agent process runs until the ledger holds its tool call's task, and
 * is SIGKILLed while that task runs, as a machine losing the agent would.
 */
import { spawn } from 'node:child_process';

import { expect } from 'vitest';

import type { AdapterServe } from './adapterServe.js';
import { waitFor } from './waitFor.js';

/**
 * Runs `script` (an ES module's source) in a Node process of its own, from `cwd`, until `serve.client` finds a task
 * under the idempotency key `key`, then SIGKILLs it; the process must have written nothing to stderr. The task's id.
 */
export async function killAgentWithItsTask(
  serve: AdapterServe,
  script: string,
  key: string,
  cwd?: string,
): Promise<string> {
  const agent = spawn(process.execPath, ['--input-type=module', '-e', script], {
    ...(cwd !== undefined && { cwd }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  agent.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise((resolve) => agent.once('exit', resolve));
  try {
    return await waitFor(
      'the agent to have its task in the ledger',
      async () => (await serve.client.get(key))?.taskId,
      30_000,
      50,
    );
  } finally {
    agent.kill('SIGKILL');
    await exited;
    expect(stderr).toBe('');
  }
}
