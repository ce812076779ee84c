/**
 * Every TypeScript block of README.md and docs/*.md typechecks as a module of a user's project would: strict, with
 * `exactOptionalPropertyTypes`, `"module": "nodenext"`, against the built package as `closeout/...`. An example that
 * no longer fits the API fails here. A block may assume names an earlier part of its page made (a `client`, say):
 * they are declared in an HTML comment right before it, `<!-- typecheck-context ... -->`, which a rendered page does
 * not show and which is checked with the block. The packages the examples import are this project's own dependencies
 * (the frameworks of docs/server.md's mounts are pinned devDependencies), linked into the checking project.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Block {
  /** Where it is: the page and the block's line. */
  where: string;
  source: string;
}

async function blocks(): Promise<Block[]> {
  const pages = [
    'README.md',
    ...(await readdir(join(ROOT, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
  ];
  const found: Block[] = [];
  for (const page of pages) {
    const text = await readFile(join(ROOT, page), 'utf8');
    for (const match of text.matchAll(/(?:<!-- typecheck-context\n([\s\S]*?)-->\n\n)?^```ts\n([\s\S]*?)^```$/gm)) {
      const line = text.slice(0, match.index + match[0].indexOf('```ts')).split('\n').length;
      found.push({ where: `${page}:${line}`, source: `${match[1] ?? ''}${match[2]!}\nexport {};\n` });
    }
  }
  return found;
}

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'closeout-docs-'));
  await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  await mkdir(join(dir, 'node_modules'));
  await symlink(ROOT, join(dir, 'node_modules', 'closeout'), 'dir');
});

/** Link each package `sources` import (and its `@types` package, when there is one) from this project's node_modules. */
async function linkImports(sources: string[]): Promise<void> {
  const names = new Set<string>();
  for (const source of sources) {
    for (const [, specifier] of source.matchAll(/^import [^'"]*['"]([^'"]+)['"]/gm)) {
      if (specifier!.startsWith('.') || specifier!.startsWith('node:') || specifier!.startsWith('closeout')) continue;
      const parts = specifier!.split('/');
      names.add(specifier!.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!);
    }
  }
  for (const name of names) {
    for (const pkg of [name, `@types/${name.replace(/^@(.*)\/(.*)$/, '$1__$2')}`]) {
      const target = join(ROOT, 'node_modules', pkg);
      if (!existsSync(target)) continue;
      await mkdir(dirname(join(dir, 'node_modules', pkg)), { recursive: true });
      if (!existsSync(join(dir, 'node_modules', pkg))) await symlink(target, join(dir, 'node_modules', pkg), 'dir');
    }
  }
}

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the TypeScript examples of README.md and docs/', () => {
  it('typecheck against the built package, each as a module of its own', async () => {
    const found = await blocks();
    // the README's server and client, and the examples of the server, client and PostgreSQL pages at least
    expect(found.length).toBeGreaterThanOrEqual(6);
    await linkImports(found.map((block) => block.source));
    const files = new Map<string, string>();
    for (const [i, block] of found.entries()) {
      const file = join(dir, `example-${i}.ts`);
      await writeFile(file, block.source);
      files.set(file, block.where);
    }
    const program = ts.createProgram([...files.keys()], {
      strict: true,
      exactOptionalPropertyTypes: true,
      noEmit: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      types: ['node'],
      typeRoots: [join(ROOT, 'node_modules', '@types')],
      skipLibCheck: true,
    });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => {
      const where = d.file ? (files.get(d.file.fileName) ?? d.file.fileName) : '';
      const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0;
      return `${where} (line ${line} of the block with its context): ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
    });
    expect(problems).toEqual([]);
  }, 120_000);
});
