/**
 * `@langchain/langgraph` is an optional peer that closeout/langchain imports at run time only for `input: 'interrupt'`
 * (docs/frameworks.md): no declaration file the package ships names it, so a consumer without it installed typechecks.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { expect, it } from 'vitest';

const DIST = fileURLToPath(new URL('../../dist', import.meta.url));

function declarations(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? declarations(join(dir, entry.name))
      : entry.name.endsWith('.d.ts')
        ? [join(dir, entry.name)]
        : [],
  );
}

it('ships no declaration that imports @langchain/langgraph', () => {
  const files = declarations(DIST).filter((file) => !file.includes(`${DIST}/bench`));
  expect(files).toContain(join(DIST, 'adapters', 'langchain.d.ts'));
  const importing = files.filter((file) =>
    /(from|import)\s*\(?\s*['"]@langchain\/langgraph/.test(readFileSync(file, 'utf8')),
  );
  expect(importing).toEqual([]);
});
