#!/usr/bin/env node
/* global console, process -- Node globals: the lint config declares none for plain .mjs files */
// The package.json a consumer of the tarball gets. `npm pack` and `npm publish` run `prepack` (the build, then this
// with `write`): package.json is kept aside and written again without what only development here uses, its scripts
// (`pretest` installing Debian packages, lint, soak, conformance, bench, and `prepare`: the tarball carries dist/) and
// `allowScripts`; `postpack` runs this with `restore`. A git-URL install never runs prepack: npm runs `prepare` (the
// build) in its clone and packs that, so nothing changes there.
//
// Usage: node scripts/packed-manifest.mjs write|restore
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { fileURLToPath, URL } from 'node:url';

const MANIFEST = fileURLToPath(new URL('../package.json', import.meta.url));
/** package.json as development has it, while the packed one stands in its place (gitignored). */
const KEPT = fileURLToPath(new URL('../.package.json.prepack', import.meta.url));
/** The fields a consumer of the tarball never needs. */
const DEVELOPMENT_ONLY = ['scripts', 'allowScripts'];

function write() {
  // a pack that stopped between the two steps left the development manifest here: writing again would lose it
  if (existsSync(KEPT)) {
    throw new Error(
      `${KEPT} is left from a pack that did not finish: run \`node scripts/packed-manifest.mjs restore\``,
    );
  }
  const text = readFileSync(MANIFEST, 'utf8');
  const manifest = JSON.parse(text);
  for (const field of DEVELOPMENT_ONLY) delete manifest[field];
  writeFileSync(KEPT, text);
  // whole or not at all: a reader of package.json meanwhile sees one manifest or the other
  writeFileSync(`${KEPT}.next`, `${JSON.stringify(manifest, null, 2)}\n`);
  renameSync(`${KEPT}.next`, MANIFEST);
}

function restore() {
  if (existsSync(KEPT)) renameSync(KEPT, MANIFEST);
}

const step = process.argv[2];
if (step === 'write') write();
else if (step === 'restore') restore();
else {
  console.error('usage: node scripts/packed-manifest.mjs write|restore');
  process.exitCode = 2;
}
