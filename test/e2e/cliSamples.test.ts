// Every line of the CLI samples in README.md and docs/cli.md has the shape of a line the CLI prints today. Here, for
// README's `closeout call` sample and docs/cli.md's `call` sample, its bad-input errors and its tour of `closeout demo`
// (`tools` and `serve`'s log: cliTools.test.ts and readmeSamples.test.ts), each compared with what the built CLI
// prints, piped, for a real `closeout demo` and real calls to a `closeout serve`. A shape is a line with its task ids,
// durations, URLs, paths and numbers made alike. The other way too, so that a line the CLI gained is missed: each
// `call` sample shows every shape the call prints (how many progress lines is free), the tour every line of the
// demo's start and of the steps it shows.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { runCli } from '../support/cli.js';
import { sampleAfter } from '../support/docSamples.js';
import { freePort } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const page = (name: string) => readFileSync(join(ROOT, name), 'utf8');

/** A line with what differs from run to run made alike: what is left is the line's shape. */
function shape(line: string): string {
  return (
    line
      // the demo shows what its fresh `closeout resume` process prints behind `   │ `: the lines any follower prints
      .replace(/^ {3}│ /, '')
      .replace(/https?:\/\/[\w.:-]+\/mcp/g, '<url>')
      .replace(/(?<![\w.<])\/[\w.-]+(?:\/[\w.-]+)+/g, '<path>')
      // record ids (UUIDs) and taskIds
      .replace(/\b[\da-f]{8}-[\da-f]{4}-[\da-f]{4}-[\da-f]{4}-[\da-f]{12}\b/g, '<id>')
      .replace(/(?<![\w-])[\w-]{32}(?![\w-])/g, '<id>')
      .replace(/\[ *\d+(?:\.\d+)?m?s\]/g, '[<t>]')
      .replace(/\b\d+(?:\.\d+)?(?:ms|s|m)\b/g, '<t>')
      .replace(/\d+/g, '<n>')
      // a table's columns are as wide as what this run put in them
      .replace(/(\S) {2,}/g, '$1  ')
      .trimEnd()
  );
}

/** The shapes of the lines of `sample`, rows left out (`…`) and the command lines (`$ `) left out. */
function sampleShapes(sample: string[]): string[] {
  return sample.filter((line) => line.trim() !== '…' && !line.startsWith('$ ')).map(shape);
}

const linesOf = (output: string) => output.trimEnd().split('\n').map(shape);

let dir: string;
let server: ServeProcess;
let demoLines: string[];
let callLines: Set<string>;
let refusedLines: Set<string>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-cli-samples-'));
  server = await startServe(['--store', join(dir, 'server.db')]);
  const env = { HOME: join(dir, 'home') };
  const demo = await runCli(['demo'], { env, timeoutMs: 90_000 });
  expect(demo.code, demo.stderr).toBe(0);
  demoLines = linesOf(demo.stdout);
  const call = await runCli(['call', server.url, 'batch_job', '--args', '{"items":3}'], { env, timeoutMs: 60_000 });
  expect(call.code, call.stderr).toBe(0);
  callLines = new Set(linesOf(call.stdout));
  const nowhere = `http://127.0.0.1:${await freePort()}/mcp`;
  const refused = [
    await runCli(['call', server.url, 'batch_jbo'], { env }),
    await runCli(['call', nowhere, 'echo'], { env }),
  ];
  for (const run of refused) expect(run.code, run.stderr).toBe(1);
  refusedLines = new Set(refused.flatMap((run) => linesOf(run.stderr)));
}, 180_000);

afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the CLI samples of README.md and docs/cli.md', () => {
  // a sample may be of any number of items: the lines are the same ones
  const call = /^npx closeout call http:\/\/127\.0\.0\.1:3000\/mcp batch_job --args '\{"items":\d+\}'$/;

  for (const name of ['README.md', 'docs/cli.md']) {
    it(`${name}: \`closeout call\` shows the lines a piped call prints, each of them`, () => {
      const shown = sampleShapes(sampleAfter(page(name), call));
      expect(shown.length, name).toBeGreaterThan(3);
      for (const line of shown)
        expect(callLines, `${name} shows a line the CLI does not print: ${line}`).toContain(line);
      for (const line of callLines) expect(shown, `${name} leaves out a line the CLI prints: ${line}`).toContain(line);
    });
  }

  it('docs/cli.md: the bad-input errors are the lines `closeout call` prints for them', () => {
    const shown = sampleShapes(
      sampleAfter(page('docs/cli.md'), 'npx closeout call http://127.0.0.1:3000/mcp batch_jbo'),
    );
    expect(shown.length).toBe(2);
    for (const line of shown)
      expect(refusedLines, `docs/cli.md shows an error the CLI does not print: ${line}`).toContain(line);
  });

  it('docs/cli.md: the tour is the lines `closeout demo` prints, its start and its end, none left out', () => {
    const sample = sampleAfter(page('docs/cli.md'), 'npx closeout demo');
    const shown = sampleShapes(sample);
    expect(shown.length).toBeGreaterThan(10);
    for (const line of shown)
      expect(demoLines, `docs/cli.md shows a line the demo does not print: ${line}`).toContain(line);
    // the tour leaves out the steps between its start and the step after the `…`: every other line is shown
    const gap = sample.findIndex((line) => line.trim() === '…');
    expect(gap).toBeGreaterThan(0);
    const resumesAt = demoLines.indexOf(shape(sample[gap + 1]!));
    expect(resumesAt, 'the step the tour goes on with').toBeGreaterThan(gap);
    for (const line of [...demoLines.slice(0, gap), ...demoLines.slice(resumesAt)]) {
      expect(shown, `docs/cli.md leaves out a line the demo prints: ${line}`).toContain(line);
    }
  });
});
