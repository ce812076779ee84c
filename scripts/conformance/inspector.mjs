/* global console, process, clearTimeout, setTimeout -- Node globals: the lint config declares none for plain .mjs files */
/**
 * Interop checks against the official MCP Inspector CLI (run by scripts/conformance.sh on the project's Node):
 * starts `closeout serve` with the demo tools on a store of its own, drives it with `inspector --cli` (on the Node 22
 * the script installed) and prints one PASS/FAIL line per case; exits 1 if any case fails.
 *
 * What the Inspector does, pinned here: at the legacy protocol era (its default for a URL) it declares no Tasks
 * extension, so an optional task tool answers inline and a task-required tool is refused with a clear error; at the
 * modern era it declares `io.modelcontextprotocol/tasks` but no elicitation, so the server creates tasks, the
 * Inspector follows them to their end, and a tool that asks for input of an undeclared kind ends its task failed with
 * -32021 (src/server/inputCapabilities.ts; README "Input only of declared kinds") instead of waiting for ever. The
 * same holds over stdio, the Inspector starting `closeout serve --stdio` itself (the cases marked stdio).
 * Usage: node scripts/conformance/inspector.mjs NODE22 INSPECTOR_LAUNCHER
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import Database from 'better-sqlite3';

const [node22, launcher] = process.argv.slice(2);
if (!node22 || !launcher) {
  console.error('usage: inspector.mjs NODE22 INSPECTOR_LAUNCHER');
  process.exit(2);
}
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const RUN_TIMEOUT_MS = 90_000; // one Inspector run on a loaded machine; a hang is a FAIL, not a stuck CI
const dir = mkdtempSync(join(tmpdir(), 'closeout-inspector-'));
const store = join(dir, 'server.db');

/** Starts `closeout serve` (demo tools) and resolves its URL, the first line it prints; bounded at 30 s. */
function startServer() {
  const child = spawn(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'serve', '--port', '0', '--store', store], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (chunk) => (err += chunk));
  const url = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`closeout serve printed no URL in 30 s: ${err}`)), 30_000);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const line = out.split('\n')[0];
      if (out.includes('\n')) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`closeout serve exited ${code}: ${err}`));
    });
  });
  return { child, url };
}

/** The Inspector run in progress, stopped with the server when this script is stopped. */
let running;

/**
 * One `inspector --cli` run: its exit status and the JSON objects it printed (stdout, then stderr). Over `http` it
 * calls the server at `url`; over `stdio` it starts `closeout serve --stdio` on the same store itself, as a host does.
 */
function inspector(url, transport, era, tool, args) {
  const argv = [launcher, '--cli', '--method', 'tools/call', '--tool-name', tool];
  argv.push('--tool-args-json', JSON.stringify(args), '--protocol-era', era, '--format', 'json');
  if (transport === 'stdio') {
    argv.push('--', process.execPath, join(ROOT, 'dist/cli/main.js'), 'serve', '--stdio', '--store', store);
  } else {
    argv.push(url);
  }
  // HOME and the catalog paths in the temporary folder: the Inspector writes its catalog and config there
  const env = {
    ...process.env,
    HOME: dir,
    MCP_CATALOG_PATH: join(dir, 'mcp.json'),
    MCP_CLIENT_CONFIG_PATH: join(dir, 'client.json'),
  };
  return new Promise((resolve) => {
    running = execFile(
      node22,
      argv,
      { env, timeout: RUN_TIMEOUT_MS, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        const objects = `${stdout}\n${stderr}`
          .split('\n')
          .map((line) => {
            try {
              return JSON.parse(line);
            } catch {
              return undefined;
            }
          })
          .filter((value) => typeof value === 'object' && value !== null);
        const status = error ? (error.killed ? 'timeout' : error.code) : 0;
        resolve({ status, objects, output: `${stdout}${stderr}`.trim() });
      },
    );
  });
}

/** The server's tasks for `tool`, oldest first, read from its store. */
function tasksOf(tool) {
  const db = new Database(store, { readonly: true, fileMustExist: true });
  try {
    return db.prepare('SELECT task_id, status, error FROM tasks WHERE tool_name = ? ORDER BY created_at').all(tool);
  } finally {
    db.close();
  }
}

const text = (result) => result?.content?.find((block) => block.type === 'text')?.text;

/**
 * The cases: label, era, tool, arguments, and a check of the run and of the tasks it created (a list of
 * problems, empty when it passed).
 */
const HTTP_CASES = [
  {
    label: 'legacy era: an optional task tool answers inline',
    era: 'legacy',
    tool: 'batch_job',
    args: { items: 2, stepMs: 50 },
    check: ({ status, objects }, created) => [
      status !== 0 && `exit ${status}, expected 0`,
      text(objects[0]?.result) !== 'Processed 2 items' && 'no result "Processed 2 items"',
      created.length !== 0 && `${created.length} task(s) created for a client without the Tasks extension`,
    ],
  },
  {
    label: 'legacy era: a failing tool is a tool error (isError)',
    era: 'legacy',
    tool: 'flaky_upstream',
    args: {},
    check: ({ status, objects }, created) => [
      status !== 5 && `exit ${status}, expected 5 (the Inspector's tool_is_error)`,
      !(objects[0]?.result?.isError === true && text(objects[0].result) === 'Upstream API rate limit exceeded') &&
        'no isError result "Upstream API rate limit exceeded"',
      created.length !== 0 && `${created.length} task(s) created`,
    ],
  },
  {
    label: 'legacy era: a task-required tool is refused, saying why',
    era: 'legacy',
    tool: 'approve_deploy',
    args: { env: 'staging' },
    check: ({ status, objects }, created) => [
      status !== 1 && `exit ${status}, expected 1`,
      !/runs only as a task: declare the io\.modelcontextprotocol\/tasks extension/.test(
        String(objects.find((o) => o.error)?.error?.message),
      ) && 'no error saying the tool runs only as a task',
      created.length !== 0 && `${created.length} task(s) created`,
    ],
  },
  {
    label: 'modern era: a completed task, followed to its result',
    era: 'modern',
    tool: 'batch_job',
    args: { items: 2, stepMs: 50 },
    check: ({ status, objects }, created) => [
      status !== 0 && `exit ${status}, expected 0`,
      text(objects[0]?.result) !== 'Processed 2 items' && 'no result "Processed 2 items"',
      !(created.length === 1 && created[0].status === 'completed') &&
        `tasks created: ${JSON.stringify(created)}, expected one completed`,
    ],
  },
  {
    label: 'modern era: a failed task, its error shown',
    era: 'modern',
    tool: 'flaky_upstream',
    args: {},
    check: ({ status, objects }, created) => [
      status !== 1 && `exit ${status}, expected 1`,
      objects.find((o) => o.error)?.error?.message !== 'Upstream API rate limit exceeded' &&
        'no error "Upstream API rate limit exceeded"',
      !(created.length === 1 && created[0].status === 'failed' && JSON.parse(created[0].error).code === -32603) &&
        `tasks created: ${JSON.stringify(created)}, expected one failed with -32603`,
    ],
  },
  {
    label: 'modern era: input asked of a client without elicitation',
    era: 'modern',
    tool: 'approve_deploy',
    args: { env: 'staging', deployMs: 0 },
    check: ({ status, objects }, created) => [
      status !== 1 && `exit ${status}, expected 1`,
      !/did not declare elicitation in its client capabilities/.test(
        String(objects.find((o) => o.error)?.error?.message),
      ) && 'no error saying elicitation was not declared',
      !(created.length === 1 && created[0].status === 'failed' && JSON.parse(created[0].error).code === -32021) &&
        `tasks created: ${JSON.stringify(created)}, expected one failed with -32021`,
    ],
  },
];

/** Over stdio, the cases whose tasks a host most depends on: inline at the legacy era, tasks and refused input at the modern. */
const STDIO_LABELS = [
  'legacy era: an optional task tool answers inline',
  'modern era: a completed task, followed to its result',
  'modern era: input asked of a client without elicitation',
];
const CASES = [
  ...HTTP_CASES.map((c) => ({ ...c, transport: 'http' })),
  ...HTTP_CASES.filter((c) => STDIO_LABELS.includes(c.label)).map((c) => ({
    ...c,
    transport: 'stdio',
    label: `over stdio, ${c.label}`,
  })),
];

const version = JSON.parse(readFileSync(join(dirname(dirname(dirname(dirname(launcher)))), 'package.json'), 'utf8'));
const server = startServer();
// stopped from outside (conformance.sh's traps, ^C): stop the server too, and leave no temporary folder behind
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    server.child.kill('SIGKILL');
    running?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    process.exit(signal === 'SIGINT' ? 130 : 143);
  });
}
let failures = 0;
try {
  const url = await server.url;
  for (const c of CASES) {
    const t0 = Date.now();
    const before = tasksOf(c.tool).length;
    const run = await inspector(url, c.transport, c.era, c.tool, c.args);
    const created = tasksOf(c.tool).slice(before);
    const problems = c.check(run, created).filter(Boolean);
    const label = `inspector ${version.version} ${c.tool}, ${c.label}`;
    const seconds = ((Date.now() - t0) / 1000).toFixed(1);
    console.log(`${problems.length === 0 ? 'PASS' : 'FAIL'} ${label} (${seconds}s)`);
    if (problems.length > 0) {
      failures++;
      for (const problem of problems) console.log(`       ${problem}`);
      console.log(`       its output: ${run.output.replace(/\s+/g, ' ').slice(0, 600)}`);
    }
  }
} catch (error) {
  failures++;
  console.log(`FAIL inspector: ${error instanceof Error ? error.message : String(error)}`);
} finally {
  server.child.kill('SIGTERM');
  await new Promise((resolve) => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) resolve();
    else server.child.once('exit', resolve);
    setTimeout(() => server.child.kill('SIGKILL'), 10_000).unref();
  });
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failures > 0 ? 1 : 0);
