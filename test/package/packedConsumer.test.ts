/**
 * The package as a user gets it (docs/operations.md, "Install"): `npm pack` ships a LICENSE, the contract suites
 * (dist/testing), no benchmark build, no source map that points at a source left out, and a manifest without
 * development scripts; the tarball unpacked into a fresh TypeScript project, with the dependencies it declares beside
 * it, typechecks a consumer of every entry point (client, server, protocol, console, testing and the three
 * agent-framework adapters) with strict settings and without `skipLibCheck`, with no `@types/pg`, no vitest and no
 * agent framework installed: the adapters' declarations import their framework's types under a `@ts-ignore`, so a
 * consumer without the framework reads them as `any` rather than failing.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const NPM_CLI = process.env['npm_execpath'];
const PACKED_MANIFEST = join(ROOT, 'scripts', 'packed-manifest.mjs');

interface PackEntry {
  filename: string;
  files: { path: string }[];
}

/** npm through the node running this test, so that the same npm is used wherever PATH points. */
function npm(args: string[], cwd: string, timeoutMs: number) {
  const [command, prefix] =
    NPM_CLI !== undefined && /npm-cli\.js$/.test(NPM_CLI) ? [process.execPath, [NPM_CLI]] : ['npm', []];
  return run(command, [...prefix, ...args], {
    cwd,
    timeout: timeoutMs,
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' },
  });
}

let dir: string;
let pack: PackEntry;
/** package.json as the repository has it. */
let developmentManifest: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'closeout-pack-'));
  developmentManifest = await readFile(join(ROOT, 'package.json'), 'utf8');
  // dist/ was built by `pretest`; the benchmarks may have compiled into dist/bench, which must not ship. What npm runs
  // around the pack but the build: prepack's manifest step, and postpack (`--ignore-scripts` skips the build)
  await run(process.execPath, [PACKED_MANIFEST, 'write']);
  try {
    const { stdout } = await npm(['pack', '--ignore-scripts', '--json', '--pack-destination', dir], ROOT, 120_000);
    pack = (JSON.parse(stdout) as PackEntry[])[0]!;
  } finally {
    await run(process.execPath, [PACKED_MANIFEST, 'restore']);
  }
}, 180_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('ships the MIT LICENSE and dist/testing, and neither dist/bench nor source maps whose sources are left out', async () => {
    const paths = pack.files.map((file) => file.path);
    expect(paths).toContain('LICENSE');
    expect(await readFile(join(ROOT, 'LICENSE'), 'utf8')).toMatch(
      /^MIT License\n\nCopyright \(c\) \d{4} Closeout contributors\n/,
    );
    expect(paths.filter((path) => path.startsWith('dist/bench'))).toEqual([]);
    expect(paths).toContain('dist/cli/main.js');
    for (const adapter of ['aiSdk', 'langchain', 'openaiAgents'])
      expect(paths).toContain(`dist/adapters/${adapter}.d.ts`);
    for (const suite of ['index', 'taskStoreContract', 'ledgerContract']) {
      expect(paths).toContain(`dist/testing/${suite}.js`);
      expect(paths).toContain(`dist/testing/${suite}.d.ts`);
    }
    for (const map of paths.filter((path) => path.endsWith('.map'))) {
      const { sources } = JSON.parse(await readFile(join(ROOT, map), 'utf8')) as { sources: string[] };
      for (const source of sources) expect(paths, `${map} points at ${source}`).toContain(join(map, '..', source));
    }
  });

  it("carries a manifest without development scripts, and leaves the repository's own as it was", async () => {
    const { stdout } = await run('tar', ['-xzOf', join(dir, pack.filename), 'package/package.json']);
    const packed = JSON.parse(stdout) as Record<string, unknown>;
    const development = JSON.parse(developmentManifest) as Record<string, unknown> & {
      scripts: Record<string, string>;
    };
    // nothing a consumer's npm would run or offer to run: no test, lint, soak or bench, no build at install
    expect(packed['scripts']).toBeUndefined();
    expect(packed['allowScripts']).toBeUndefined();
    for (const field of ['name', 'version', 'exports', 'bin', 'engines', 'dependencies', 'peerDependencies'])
      expect(packed[field], field).toEqual(development[field]);
    expect(await readFile(join(ROOT, 'package.json'), 'utf8')).toBe(developmentManifest);
    // npm writes the packed manifest in prepack, after the build, and puts the development one back in postpack; a
    // git-URL install runs only prepare, the build
    expect(development.scripts['prepack']).toBe('npm run build && node scripts/packed-manifest.mjs write');
    expect(development.scripts['postpack']).toBe('node scripts/packed-manifest.mjs restore');
    expect(development.scripts['prepare']).toBe('npm run build');
  });

  it('unpacked into a fresh TypeScript project, typechecks a consumer of every entry point strictly', async () => {
    const project = join(dir, 'consumer');
    await mkdir(project);
    await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    // what `tsc --init` (TypeScript 5.9) writes, minus skipLibCheck and the emit settings
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          target: 'esnext',
          types: ['node'],
          strict: true,
          noUncheckedIndexedAccess: true,
          exactOptionalPropertyTypes: true,
          verbatimModuleSyntax: true,
          isolatedModules: true,
          noUncheckedSideEffectImports: true,
          moduleDetection: 'force',
          noEmit: true,
        },
        include: ['consumer.ts'],
      }),
    );
    await writeFile(join(project, 'consumer.ts'), CONSUMER);
    // the tarball unpacked where npm puts it, and beside it what its package.json declares plus the consumer's own zod
    // and @types/node, each the copy this repository installed: nothing fetched (tests send nothing beyond loopback,
    // and `npm ci` leaves no registry metadata in the cache for an offline `npm install` to resolve from), and no
    // @types/pg, so a type of pg reaching the declarations fails the typecheck
    const modules = join(project, 'node_modules');
    const unpacked = join(modules, 'closeout');
    await mkdir(unpacked, { recursive: true });
    await run('tar', ['-xzf', join(dir, pack.filename), '-C', unpacked, '--strip-components=1']);
    const manifest = JSON.parse(await readFile(join(unpacked, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    const beside = [...new Set([...Object.keys(manifest.dependencies ?? {}), 'zod', '@types/node'])];
    expect(beside).not.toContain('@types/pg');
    for (const name of beside) {
      await mkdir(join(modules, name, '..'), { recursive: true });
      await symlink(join(ROOT, 'node_modules', name), join(modules, name), 'dir');
    }
    // no agent framework beside it (optional peers, as the manifest says): the consumer imports closeout/ai-sdk,
    // closeout/langchain and closeout/openai-agents all the same, and their declarations must not break it; nor
    // vitest, which closeout/testing loads when a test file runs its suites, while its declarations name no vitest type
    for (const peer of ['ai', '@langchain/core', '@langchain/langgraph', '@openai/agents-core', 'vitest']) {
      expect(beside, `${peer} is an optional peer, not a dependency`).not.toContain(peer);
    }
    const typecheck = await run(process.execPath, [TSC, '-p', project], { timeout: 240_000 }).catch(
      (error: { stdout?: string }) => ({ stdout: error.stdout ?? String(error) }),
    );
    expect(typecheck.stdout).toBe('');
  }, 600_000);
});

/** Uses each entry point the way the README and docs/frameworks.md do, types included, and closeout/testing as docs/server.md does. */
const CONSUMER = `
import {
  connectHttpTaskClient,
  isTaskHandle,
  SqliteLedger,
  type TaskClient,
  type TaskOutcome,
  type TaskRecord,
} from 'closeout/client';
import { isTerminalStatus, TASKS_EXTENSION_ID, type DetailedTask } from 'closeout/protocol';
import {
  openTaskStore,
  PostgresTaskStore,
  serveTaskServer,
  SqliteTaskStore,
  TaskServer,
  type TaskContext,
} from 'closeout/server';
import {
  describeLedgerContract,
  describeTaskStoreContract,
  type LedgerFixture,
  type TaskStoreFixture,
} from 'closeout/testing';
import * as z from 'zod/v4';
import { aiSdkTaskTools, type AiSdkTaskResult, type AiSdkTaskToolsOptions, TaskToolError } from 'closeout/ai-sdk';
import { createConsoleHandler, type ConsoleHandler } from 'closeout/console';
import {
  closeTaskTools,
  langchainTaskTools,
  type LangChainTaskToolsOptions,
  type PendingInput,
  type TaskClientConnectOptions,
} from 'closeout/langchain';
import {
  answerInterruption,
  interruptionInput,
  openAIAgentsTaskTools,
  type OpenAIAgentsTaskToolsOptions,
} from 'closeout/openai-agents';

export async function server(): Promise<void> {
  const tasks = new TaskServer({ store: new SqliteTaskStore('./tasks.db') });
  tasks.registerTool(
    'echo_later',
    { inputSchema: z.object({ text: z.string() }), task: { support: 'optional' } },
    async ({ text }, ctx: TaskContext) => {
      await ctx.status('working on it');
      return { content: [{ type: 'text', text }] };
    },
  );
  const serving = await serveTaskServer(tasks, { port: 0 });
  await serving.close();
  const pg: PostgresTaskStore = await PostgresTaskStore.open('postgres://localhost/closeout');
  await pg.close();
  await (await openTaskStore('./other.db')).close();
}

export async function client(): Promise<TaskOutcome | undefined> {
  const client: TaskClient = await connectHttpTaskClient('http://127.0.0.1:3000/mcp', { ledger: './ledger.db' });
  const answer = await client.callTool('echo_later', { text: 'hi' }, { idempotencyKey: 'k' });
  const records: TaskRecord[] = await client.list();
  console.log(records.length, TASKS_EXTENSION_ID, SqliteLedger.name);
  const task: DetailedTask | undefined = undefined;
  if (task !== undefined && isTerminalStatus((task as DetailedTask).status)) return undefined;
  return isTaskHandle(answer) ? answer.outcome() : undefined;
}

export function contracts(): void {
  describeTaskStoreContract('SqliteTaskStore', async (): Promise<TaskStoreFixture> => {
    const store = new SqliteTaskStore('./contract.db');
    return { store, openSecond: async () => new SqliteTaskStore('./contract.db'), cleanup: () => store.close() };
  });
  describeLedgerContract('SqliteLedger', async (): Promise<LedgerFixture> => {
    const ledger = new SqliteLedger('./contract-ledger.db');
    return {
      ledger,
      openSecond: async (options) => new SqliteLedger('./contract-ledger.db', options),
      execRaw: async () => undefined,
      historyTable: 'status_history',
      cleanup: () => ledger.dispose(),
    };
  });
}

// the adapters' entry points, typechecked with none of their frameworks installed
export async function adapters(client: TaskClient): Promise<string[]> {
  const aiOptions: AiSdkTaskToolsOptions = { scope: 'chat-1', onAbort: 'cancel', tools: ['echo_later'] };
  const aiTools = await aiSdkTaskTools(client, aiOptions);
  const result: AiSdkTaskResult | undefined = undefined;
  const lcOptions: LangChainTaskToolsOptions = { input: 'answer-tool' };
  const lcTools = await langchainTaskTools(client, lcOptions);
  const connect: TaskClientConnectOptions = { url: 'http://127.0.0.1:3000/mcp', ledger: './agent-ledger.db' };
  await closeTaskTools(await aiSdkTaskTools(connect));
  const oaOptions: OpenAIAgentsTaskToolsOptions = { scope: 'c-1', onProgress: (update) => console.log(update.tool) };
  const oaTools = await openAIAgentsTaskTools(client, oaOptions);
  const asked: PendingInput | undefined = await interruptionInput(client, oaTools as never);
  await answerInterruption(client, { approve: () => undefined }, undefined as never, { action: 'decline' });
  const failure = new TaskToolError('failed', 't-1', 'failed', -32603);
  const consoleHandler: ConsoleHandler = createConsoleHandler({ ledger: new SqliteLedger('./ledger.db') });
  await consoleHandler.close();
  return [...Object.keys(aiTools), String(lcTools.length), String(asked?.key), failure.kind, String(result)];
}
`;
