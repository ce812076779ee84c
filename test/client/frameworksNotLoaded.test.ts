/**
 * The agent frameworks are optional peer dependencies (docs/frameworks.md): only an adapter's own entry point
 * (`closeout/ai-sdk`, `closeout/langchain`, `closeout/openai-agents`) loads its framework; `closeout/client` and the
 * CLI load none, and `closeout/langchain` loads `@langchain/langgraph` only for `input: 'interrupt'`. Seen at run time through a module resolve hook (the frameworks are ES modules, which the
 * require-cache probe of importCost.test.ts does not see), with the adapter entry points as the control.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

import { afterAll, beforeAll, expect, it } from 'vitest';

const run = promisify(execFile);
const dist = (path: string) => fileURLToPath(new URL(`../../dist/${path}`, import.meta.url));
const FRAMEWORKS = ['ai', '@ai-sdk/provider-utils', '@langchain/core', '@langchain/langgraph', '@openai/agents-core'];

let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-frameworks-'));
  writeFileSync(
    join(dir, 'hooks.mjs'),
    `import { appendFileSync } from 'node:fs';
     export async function resolve(specifier, context, next) {
       const resolved = await next(specifier, context);
       appendFileSync(${JSON.stringify(join(dir, 'loaded.txt'))}, resolved.url + '\\n');
       return resolved;
     }`,
  );
  writeFileSync(
    join(dir, 'register.mjs'),
    `import { register } from 'node:module';
     register(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)});`,
  );
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The npm packages a fresh Node process resolved while running `args` (a script file and its arguments). */
async function packagesResolved(args: string[]): Promise<string[]> {
  writeFileSync(join(dir, 'loaded.txt'), '');
  await run(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, ...args], {
    timeout: 60_000,
  });
  const urls = readFileSync(join(dir, 'loaded.txt'), 'utf8').split('\n');
  return [...new Set(urls.map((url) => /node_modules\/((@[^/]+\/)?[^/]+)/.exec(url)?.[1]).filter(Boolean))] as string[];
}

function importing(entry: string): string[] {
  return ['--input-type=module', '-e', `await import(${JSON.stringify(entry)});`];
}

it('loads no agent framework for closeout/client or the CLI; each adapter loads its own', async () => {
  const client = await packagesResolved(importing(dist('client/index.js')));
  expect(client).toContain('@modelcontextprotocol/client');
  for (const framework of FRAMEWORKS) expect(client).not.toContain(framework);
  const cli = await packagesResolved([dist('cli/main.js'), '--help']);
  expect(cli).toContain('commander');
  for (const framework of FRAMEWORKS) expect(cli).not.toContain(framework);

  expect(await packagesResolved(importing(dist('adapters/aiSdk.js')))).toContain('ai');
  const langchain = await packagesResolved(importing(dist('adapters/langchain.js')));
  expect(langchain).toContain('@langchain/core');
  // LangGraph is imported by closeout/langchain only when a caller asks for input: 'interrupt'
  expect(langchain).not.toContain('@langchain/langgraph');
  const optedIn = await packagesResolved([
    '--input-type=module',
    '-e',
    `const { graphInterruptInput } = await import(${JSON.stringify(dist('adapters/langgraphInterrupt.js'))});
     await graphInterruptInput(undefined);`,
  ]);
  expect(optedIn).toContain('@langchain/langgraph');
  expect(await packagesResolved(importing(dist('adapters/openaiAgents.js')))).toContain('@openai/agents-core');
}, 120_000);
