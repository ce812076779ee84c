// Invariant: code cites the spec or this repository's documents, never an issue number; history goes in commit
// messages. A comment, test name or printed label says what holds and points at docs/DESIGN.md, RELIABILITY.md,
// bench/RESULTS.md or docs/*.md for why; an issue number means nothing to a reader of the code. Every text file under
// src/, test/, bench/, scripts/ and web/ is read (Markdown, binaries, node_modules and dist apart), and no line may
// name an issue by number.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

import { expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');
const DIRECTORIES = ['src', 'test', 'bench', 'scripts', 'web'];
const SKIPPED_DIRECTORIES = new Set(['node_modules', 'dist', '.git']);
const BINARY = /\.(png|jpe?g|gif|ico|webp|db|sqlite|wasm|gz|tgz|zip|woff2?|ttf|pdf)$/i;
// built from parts so that this file's own source does not match it
const ISSUE_NUMBER = new RegExp('\\bissue' + 's?\\s+#?\\d', 'i');

/** Every file under the checked directories that is read: not Markdown, not binary, not in a skipped directory. */
function checkedFiles(): string[] {
  const files: string[] = [];
  for (const directory of DIRECTORIES) {
    const top = join(ROOT, directory);
    if (!existsSync(top)) continue;
    for (const entry of readdirSync(top, { recursive: true, withFileTypes: true })) {
      if (!entry.isFile()) continue;
      const path = join(entry.parentPath, entry.name);
      const parts = relative(ROOT, path).split(sep);
      if (parts.some((part) => SKIPPED_DIRECTORIES.has(part))) continue;
      if (entry.name.endsWith('.md') || BINARY.test(entry.name)) continue;
      files.push(path);
    }
  }
  return files.sort();
}

it('names no issue by number in code, tests, benchmarks or scripts', () => {
  const files = checkedFiles();
  expect(files.length).toBeGreaterThan(100);
  const found: string[] = [];
  for (const file of files) {
    const bytes = readFileSync(file);
    if (bytes.includes(0)) continue; // binary, whatever its name
    const lines = bytes.toString('utf8').split('\n');
    lines.forEach((line, index) => {
      if (ISSUE_NUMBER.test(line)) found.push(`${relative(ROOT, file)}:${index + 1}`);
    });
  }
  expect(found).toEqual([]);
});
