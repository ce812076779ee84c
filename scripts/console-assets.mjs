// The console's page into dist/console/web (README.md, "The console"): its HTML and styles from src/console/web, its
// scripts as tsconfig.web.json compiled them, and the front-end libraries it imports (preact, its hooks, htm) copied
// from node_modules with their licences, so the package serves everything itself and works offline.
import { copyFileSync, cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, URL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const from = join(root, 'src/console/web');
const compiled = join(root, 'dist/.console-web/web');
const to = join(root, 'dist/console/web');
const vendor = join(to, 'vendor');

rmSync(to, { recursive: true, force: true });
mkdirSync(vendor, { recursive: true });
for (const file of ['index.html', 'console.css']) copyFileSync(join(from, file), join(to, file));
cpSync(compiled, to, { recursive: true });
rmSync(join(root, 'dist/.console-web'), { recursive: true, force: true });

/** A library's ES module as the page imports it (the import map in index.html names these files). */
function library(specifier, name, licence) {
  const path = fileURLToPath(import.meta.resolve(specifier));
  // the source map is not shipped: its comment would have the browser ask for it
  const code = readFileSync(path, 'utf8').replace(/\n?\/\/# sourceMappingURL=\S+\s*$/, '\n');
  writeFileSync(join(vendor, name), code);
  copyFileSync(join(dirname(path), licence), join(vendor, `${name}.LICENSE.txt`));
}
library('preact', 'preact.mjs', '../LICENSE');
library('preact/hooks', 'hooks.mjs', '../../LICENSE');
library('htm', 'htm.mjs', '../LICENSE');
