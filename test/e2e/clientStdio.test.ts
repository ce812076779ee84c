// The TaskClient over stdio: one server process (the SDK's server/discover probe runs on it, not on a throwaway
// sibling: see sdkGlue.ts point 5) carries a task handle, its polls and an input answer to a raw Tasks server, and
// the result is closed out in the ledger.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { CallToolResult } from '@modelcontextprotocol/client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { TaskClient, TaskHandle } from '../../src/client/index.js';
import { connectStdioTaskClient, isTaskHandle } from '../../src/client/index.js';

const SERVER = fileURLToPath(new URL('./fixtures/clientStdioTasksServer.mjs', import.meta.url));

let dir: string;
let client: TaskClient;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-client-stdio-'));
  client = await connectStdioTaskClient(
    { command: process.execPath, args: [SERVER] },
    {
      ledger: join(dir, 'ledger.db'),
      pollPolicy: { floorMs: 5, defaultIntervalMs: 10 },
      inputHandlers: { elicitation: () => ({ action: 'accept', content: { name: 'stdio' } }) },
    },
  );
});

afterEach(async () => {
  await client.close();
  rmSync(dir, { recursive: true, force: true });
});

const textOf = (result: CallToolResult) => (result.content[0] as { text: string }).text;

describe('TaskClient over stdio', () => {
  it('returns an immediate result and closes out a task, all in the one session process', async () => {
    const immediate = (await client.callTool('echo')) as CallToolResult;
    const pid = textOf(immediate).replace('echo ', '');
    const handle = (await client.callTool('slow')) as TaskHandle;
    expect(isTaskHandle(handle)).toBe(true);
    expect(textOf(await handle.result())).toBe(`slow done by ${pid}`);
    expect(client.endpoint).toBe(`stdio:${process.execPath} ${SERVER}`);
    expect(await client.get(handle.taskId)).toMatchObject({ localState: 'terminal', status: 'completed' });
  });

  it('answers an input request over stdio', async () => {
    const handle = (await client.callTool('ask')) as TaskHandle;
    const result = await handle.result();
    expect(result.structuredContent).toEqual({ answer: { action: 'accept', content: { name: 'stdio' } } });
  });
});
