// Invariant: no two source files import each other, directly or around a circle, type-only imports included
// (docs/DESIGN.md, "Layout"): shared types live in leaf modules, so each file can be read, and loaded, after the ones
// it names.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';

import { expect, it } from 'vitest';

const SRC = join(import.meta.dirname, '..', 'src');

/** Every .ts file under src/, as a path relative to src/. */
function sources(): string[] {
  return (readdirSync(SRC, { recursive: true }) as string[]).filter((file) => file.endsWith('.ts')).sort();
}

/** The files of src/ that `file` imports or re-exports, by relative specifier, type-only imports included. */
function importsOf(file: string, known: Set<string>): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  const found = new Set<string>();
  for (const match of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"](\.{1,2}\/[^'"]+)['"]/gm)) {
    const target = normalize(join(dirname(file), match[1]!)).replace(/\.js$/, '.ts');
    if (known.has(target)) found.add(target);
  }
  return [...found];
}

/** The strongly connected components of more than one file (Tarjan), each sorted. */
function circles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const indexOf = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    indexOf.set(node, index);
    low.set(node, index);
    index += 1;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!indexOf.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, indexOf.get(next)!));
      }
    }
    if (low.get(node) === indexOf.get(node)) {
      const component: string[] = [];
      for (let member = stack.pop()!; ; member = stack.pop()!) {
        onStack.delete(member);
        component.push(member);
        if (member === node) break;
      }
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const node of graph.keys()) if (!indexOf.has(node)) visit(node);
  return found;
}

it('finds no import circle among the source files', () => {
  const files = sources();
  const names = new Set(files);
  const graph = new Map(files.map((file) => [file, importsOf(file, names)]));
  // the probe sees imports at all: the client's entry point names files of its folder
  expect(graph.get('client/index.ts')?.length).toBeGreaterThan(3);
  const known: string[][] = [];
  expect(circles(graph).map((circle) => circle.map((file) => relative('.', file)))).toEqual(known);
});

it('keeps src/shared below both halves, and the halves apart', () => {
  // invariant (docs/DESIGN.md, "Storage foundation"): shared/ imports protocol/ at most; server/ and client/ never
  // import each other; nothing imports testing/ (it loads vitest); nothing is loose at src/ root
  const files = sources();
  const names = new Set(files);
  const top = (file: string) => file.split('/')[0]!;
  const crossings: string[] = [];
  for (const file of files) {
    for (const target of importsOf(file, names)) {
      const from = top(file);
      const to = top(target);
      const refused =
        (from === 'shared' && !['shared', 'protocol'].includes(to)) ||
        (from === 'server' && to === 'client') ||
        (from === 'client' && to === 'server') ||
        (from !== 'testing' && to === 'testing');
      if (refused) crossings.push(`${file} -> ${target}`);
    }
  }
  expect(crossings).toEqual([]);
  expect(files.filter((file) => !file.includes('/'))).toEqual([]);
  // the probe sees the layer it guards: both stores stand on shared/
  expect(importsOf('server/store/postgresTaskStore.ts', names)).toContain('shared/postgres/migrations.ts');
  expect(importsOf('testing/index.ts', names)).toContain('testing/taskStoreContract.ts');
});

it('keeps every source file under 700 lines', () => {
  // invariant (docs/DESIGN.md, "Layout"): a module does one job, and no source file is over about 700 lines; a file
  // past it is split by job, not squeezed
  const counts = sources().map((file) => ({ file, lines: linesOf(file) }));
  // the probe counts lines: the longest file is well past a hundred
  expect(Math.max(...counts.map(({ lines }) => lines))).toBeGreaterThan(100);
  expect(counts.filter(({ lines }) => lines > 700).map(({ file, lines }) => `${file}: ${lines} lines`)).toEqual([]);
});

/** How many lines `file` (relative to src/) has, as `wc -l` counts them. */
function linesOf(file: string): number {
  return readFileSync(join(SRC, file), 'utf8').split('\n').length - 1;
}
