// The console in a real browser (Chromium through playwright-core) over a real `closeout serve` and the ledger of
// real `closeout call`s: the list shows the ledger's tasks and the store's; a status or tool filter narrows it, and
// the search finds a store task by its idempotency key; an input answered in the page's form reaches the server's
// task (tasks/update) and the task completes; a cancel reaches the server, from the ledger (tasks/cancel) and from the
// store; a task finishing elsewhere shows within a second with no reload; bulk cancel and resubmit, after a
// confirmation, reach the server; keyboard and a phone-sized screen; the page logs no error; 100,000 stored records
// list in under a second, on a ledger and on a store; a token is required when one is set, and without one only
// loopback host names are served; a task's trace id links to the viewer by the `--trace-link` template, and is plain
// text without one; `closeout demo --keep` prints the command that opens its console; and createConsoleHandler works
// mounted under a prefix in Express.
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import type Database from 'better-sqlite3';
import express from 'express';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/ledger/sqliteLedger.js';
import type { ConsoleHandler, ConsoleOptions } from '../../src/console/index.js';
import { IDEMPOTENCY_KEY_META_KEY } from '../../src/protocol/index.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { collectErrors, type ConsoleProcess, findChromium, launchChromium, startConsole } from '../support/browser.js';
import { jsonLines, runCli, startCli } from '../support/cli.js';
import { newTask } from '../support/newTask.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const chromium = findChromium();
const missing = 'missing' in chromium ? chromium.missing : undefined;
if (missing) console.warn(`skipping the console's browser tests: ${missing}`);

/** Where docs/cli.md's screenshots are written when CONSOLE_SCREENSHOTS names a folder (docs/). */
const SCREENSHOTS = process.env['CONSOLE_SCREENSHOTS'];

let browser: Browser;
beforeAll(async () => {
  if (!missing) browser = await launchChromium((chromium as { path: string }).path);
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

/** Runs `closeout call URL TOOL ... --detach --json` and returns the task id it left in the ledger. */
async function detachedCall(ledger: string, url: string, tool: string, ...args: string[]): Promise<string> {
  const run = await runCli(['call', url, tool, ...args, '--detach', '--json'], { ledger });
  expect(run.code, run.stderr).toBe(0);
  const taskId = jsonLines(run.stdout).find((line) => typeof line['taskId'] === 'string')?.['taskId'];
  if (typeof taskId !== 'string') throw new Error(`no taskId in ${run.stdout}`);
  return taskId;
}

async function serverStatus(url: string, taskId: string): Promise<unknown> {
  return (await rpc(url, 'tasks/get', { taskId })).result?.['status'];
}

/** The rows the page lists now: status and tool of each. */
async function rows(page: Page): Promise<Array<{ status: string; tool: string }>> {
  return page.$$eval('table.tasks tbody tr', (trs) =>
    trs.map((tr) => ({
      status: tr.getAttribute('data-status') ?? '',
      tool: tr.querySelector('td:nth-child(3)')?.textContent?.trim() ?? '',
    })),
  );
}

/** A store file with these tasks in it (rows written in SQL: no server needs to run them). */
async function storeWith(path: string, tasks: Array<{ id: string; tool: string; status: string; at: number }>) {
  await new SqliteTaskStore(path).close();
  const db = openDatabase(path);
  try {
    addTasks(db, tasks);
  } finally {
    db.close();
  }
}

function addTasks(db: Database.Database, tasks: Array<{ id: string; tool: string; status: string; at: number }>) {
  const insert = db.prepare(`INSERT INTO tasks (task_id, owner, tool_name, arguments, status, created_at,
    last_updated_at, ttl_ms, expires_at, poll_interval_ms, resumable) VALUES (?, 'p', ?, '{}', ?, ?, ?, NULL, NULL, 1000, 0)`);
  for (const task of tasks) insert.run(task.id, task.tool, task.status, task.at, task.at);
}

/** Waits until the page lists exactly `n` rows (locators, not a string to evaluate: the page's CSP refuses eval). */
async function listed(page: Page, n: number): Promise<void> {
  const all = page.locator('table.tasks tbody tr');
  if (n > 0) await all.nth(n - 1).waitFor();
  await all.nth(n).waitFor({ state: 'detached' });
}

describe.skipIf(missing !== undefined)('the console in Chromium, over a real serve and its clients', () => {
  let dir: string;
  let ledger: string;
  let store: string;
  let serve: ServeProcess;
  let console_: ConsoleProcess;
  let page: Page;
  let errors: string[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-console-'));
    ledger = join(dir, 'ledger.db');
    store = join(dir, 'server.db');
    // a short lease: a cancel recorded in the store is heard at the next renewal (a third of it)
    serve = await startServe(['--store', store, '--lease-ms', '3000']);
    expect((await runCli(['call', serve.url, 'batch_job', '--args', '{"items":2,"stepMs":0}'], { ledger })).code).toBe(
      0,
    );
    // flaky_upstream fails its first attempt: a failed task in the ledger and the store
    await runCli(['call', serve.url, 'flaky_upstream'], { ledger });
    console_ = await startConsole(['--ledger', ledger, '--store', store]);
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    errors = collectErrors(page);
  }, 90_000);

  afterAll(async () => {
    await page?.close();
    await console_?.stop();
    await serve?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('lists the ledger’s tasks and the store’s, newest first, with counts', async () => {
    await page.goto(console_.url);
    await page.waitForSelector('table.tasks tbody tr');
    expect(await rows(page)).toEqual([
      { status: 'failed', tool: 'flaky_upstream' },
      { status: 'completed', tool: 'batch_job' },
    ]);
    expect(await page.textContent('.counts')).toMatch(/all 2.*completed 1.*failed 1/s);
    if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, 'console-list.png') });
    await page.click('nav.sources >> text=Server store');
    await page.waitForSelector('table.tasks tbody tr >> text=anonymous');
    expect(await rows(page)).toEqual([
      { status: 'failed', tool: 'flaky_upstream' },
      { status: 'completed', tool: 'batch_job' },
    ]);
  });

  it('narrows the list by status and by tool', async () => {
    await page.goto(`${console_.url}#/ledger`);
    await page.waitForSelector('table.tasks tbody tr');
    await page.click('.counts >> text=failed');
    await listed(page, 1);
    expect(await rows(page)).toEqual([{ status: 'failed', tool: 'flaky_upstream' }]);
    expect(page.url()).toContain('status=failed');
    await page.click('text=Clear');
    await listed(page, 2);
    expect(page.url()).not.toContain('status=');
    await page.fill('#tool', 'batch_job');
    await page.press('#tool', 'Enter');
    await listed(page, 1);
    expect(await rows(page)).toEqual([{ status: 'completed', tool: 'batch_job' }]);
  });

  it('finds a store task by its idempotency key in the search box', async () => {
    const created = await rpc(
      serve.url,
      'tools/call',
      { name: 'flaky_upstream', arguments: {} },
      { meta: { [IDEMPOTENCY_KEY_META_KEY]: 'invoice-2026-0042' } },
    );
    const taskId = created.result?.['taskId'] as string;
    await page.goto(`${console_.url}#/store`);
    await page.waitForSelector('table.tasks tbody tr');
    await page.fill('#search', 'invoice-2026-0042');
    await page.press('#search', 'Enter');
    await listed(page, 1);
    expect(await page.getAttribute('table.tasks tbody tr td.id a', 'title')).toBe(taskId);
  });

  it('is usable from the keyboard, on a phone-sized screen', async () => {
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
    const phoneErrors = collectErrors(phone);
    try {
      await phone.goto(`${console_.url}#/ledger`);
      await listed(phone, 2);
      // nothing wider than the screen: no sideways scrolling of the page
      expect(await phone.$eval('html', (html) => html.scrollWidth - html.clientWidth)).toBeLessThanOrEqual(0);
      const failedTask = (await phone.getAttribute('table.tasks tbody tr[data-status="failed"] td.id a', 'title'))!;
      // `/` goes to the search, Enter applies it
      await phone.keyboard.press('/');
      expect(await phone.$eval(':focus', (element) => element.id)).toBe('search');
      await phone.keyboard.type(failedTask.slice(0, 12));
      await phone.keyboard.press('Enter');
      await listed(phone, 1);
      // a row's link opens the detail, Escape goes back to the list
      await phone.focus('table.tasks td.id a');
      await phone.keyboard.press('Enter');
      await phone.waitForSelector('article.detail h2 .s-failed');
      await phone.keyboard.press('Escape');
      await phone.waitForSelector('table.tasks tbody tr[data-status="failed"]');
      expect(phoneErrors).toEqual([]);
    } finally {
      await phone.close();
    }
  });

  it('answers an input in the form: it reaches the server’s task, which completes', async () => {
    const taskId = await detachedCall(ledger, serve.url, 'approve_deploy', '--arg', 'env=staging');
    await waitFor('the task to ask for approval', async () =>
      (await serverStatus(serve.url, taskId)) === 'input_required' ? true : undefined,
    );
    await page.goto(`${console_.url}#/ledger?search=${taskId}`);
    await page.click(`table.tasks a[title="${taskId}"]`);
    // nobody follows the detached task: the console takes it up, and its poll brings the form
    await page.click('button:has-text("Follow here")');
    await page.click('button:has-text("Yes, follow it")');
    await page.waitForSelector('form.answer', { timeout: 15_000 });
    expect(await page.isChecked('form.answer input[name="approve"]')).toBe(true);
    // an answer that does not fit the form is refused by the console too (not only by the page), and nothing is kept
    const recordId = decodeURIComponent(page.url().split('/').pop()!);
    const refused = await fetch(`${console_.url}api/ledger/tasks/${encodeURIComponent(recordId)}/answer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'approval', response: { action: 'accept', content: { approve: 'yes' } } }),
    });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: string }).error).toMatch(/^the answer does not fit the form: .*approve/);
    expect(await serverStatus(serve.url, taskId)).toBe('input_required');
    await page.fill('form.answer input[name="note"]', 'checked by the console test');
    if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, 'console-answer.png'), fullPage: true });
    await page.click('button:has-text("Send answer")');
    await waitFor(
      'the server’s task to complete',
      async () => ((await serverStatus(serve.url, taskId)) === 'completed' ? true : undefined),
      20_000,
    );
    const result = (await rpc(serve.url, 'tasks/get', { taskId })).result;
    expect(JSON.stringify(result)).toContain('Deployed to staging (checked by the console test)');
    // the console follows it to its close-out: the page shows it, live
    await page.waitForSelector('article.detail h2 .s-completed', { timeout: 10_000 });
    await page.waitForSelector('text=Deployed to staging (checked by the console test)');
    if (SCREENSHOTS) await page.screenshot({ path: join(SCREENSHOTS, 'console-detail.png'), fullPage: true });
  });

  it('cancels a ledger task (tasks/cancel) and a store task: both reach the server', async () => {
    const fromLedger = await detachedCall(ledger, serve.url, 'export_report', '--args', '{"pages":300,"pageMs":200}');
    await page.goto(`${console_.url}#/ledger?search=${fromLedger}`);
    await page.click(`table.tasks a[title="${fromLedger}"]`);
    await page.click('button:has-text("Cancel task")');
    await page.click('button:has-text("Yes, cancel it")');
    await waitFor(
      'the ledger task to be cancelled on the server',
      async () => ((await serverStatus(serve.url, fromLedger)) === 'cancelled' ? true : undefined),
      20_000,
    );
    await page.waitForSelector('article.detail h2 .s-cancelled', { timeout: 10_000 });

    // a task some other client made: only the store knows it
    const created = await rpc(serve.url, 'tools/call', {
      name: 'export_report',
      arguments: { pages: 300, pageMs: 200 },
    });
    const fromStore = created.result?.['taskId'] as string;
    await page.goto(`${console_.url}#/store/${encodeURIComponent(fromStore)}`);
    await page.click('button:has-text("Cancel task")');
    await page.click('button:has-text("Yes, cancel it")');
    await page.waitForSelector('text=cancel of task');
    await waitFor(
      'the store task to be cancelled by its server',
      async () => ((await serverStatus(serve.url, fromStore)) === 'cancelled' ? true : undefined),
      20_000,
    );
    await page.waitForSelector('article.detail h2 .s-cancelled', { timeout: 10_000 });
  });

  it('shows a task finishing elsewhere within a second, without a reload', async () => {
    const ledgerPage = page;
    const storePage = await browser.newPage();
    const storeErrors = collectErrors(storePage);
    try {
      await ledgerPage.goto(`${console_.url}#/ledger?tool=batch_job`);
      await storePage.goto(`${console_.url}#/store?tool=batch_job`);
      await ledgerPage.waitForSelector('table.tasks tbody tr');
      await storePage.waitForSelector('table.tasks tbody tr');
      const reloads: string[] = [];
      for (const p of [ledgerPage, storePage]) p.on('framenavigated', (frame) => reloads.push(frame.url()));
      // another process submits and follows a task to its end; the console only reads
      const call = startCli(['call', serve.url, 'batch_job', '--args', '{"items":5,"stepMs":400}'], { ledger });
      await ledgerPage.waitForSelector('table.tasks tbody tr[data-status="working"]', { timeout: 10_000 });
      await storePage.waitForSelector('table.tasks tbody tr[data-status="working"]', { timeout: 10_000 });
      const reader = openDatabase(ledger, { readonly: true });
      const storeReader = openDatabase(store, { readonly: true });
      try {
        const shown = (p: Page) =>
          p
            .locator('table.tasks tbody tr[data-status="working"]')
            .first()
            .waitFor({ state: 'detached', timeout: 20_000 })
            .then(() => Date.now());
        const [ledgerShown, storeShown] = [shown(ledgerPage), shown(storePage)];
        // when each change was committed, seen by polling the files directly
        const committed = (db: Database.Database, sql: string) =>
          waitFor('the change to be committed', () => (db.prepare(sql).get() ? Date.now() : undefined), 20_000, 10);
        const [storeAt, ledgerAt] = await Promise.all([
          committed(storeReader, `SELECT 1 FROM tasks WHERE tool_name = 'batch_job' AND status = 'working'`).then(() =>
            committed(
              storeReader,
              `SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE status = 'working' AND tool_name = 'batch_job')`,
            ),
          ),
          committed(
            reader,
            `SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM submissions WHERE tool_name = 'batch_job'
            AND local_state IN ('tracking','submitting'))`,
          ),
        ]);
        const ledgerLag = (await ledgerShown) - ledgerAt;
        const storeLag = (await storeShown) - storeAt;
        expect(ledgerLag, `the ledger page showed the close-out ${ledgerLag} ms after its commit`).toBeLessThan(1_000);
        expect(storeLag, `the store page showed the completion ${storeLag} ms after its commit`).toBeLessThan(1_000);
      } finally {
        reader.close();
        storeReader.close();
      }
      expect((await call.done).code).toBe(0);
      expect(await ledgerPage.$$('table.tasks tbody tr[data-status="completed"]')).toHaveLength(2);
      expect(reloads).toEqual([]);
      expect(storeErrors).toEqual([]);
    } finally {
      await storePage.close();
    }
  });

  it('cancels every open task a filter selects, in the ledger and in the store, after a confirmation', async () => {
    const long = ['--args', '{"pages":300,"pageMs":200}'];
    const fromLedger = [
      await detachedCall(ledger, serve.url, 'export_report', ...long),
      await detachedCall(ledger, serve.url, 'export_report', ...long),
    ];
    await page.goto(`${console_.url}#/ledger?tool=export_report&status=working`);
    await page.waitForSelector(`table.tasks a[title="${fromLedger[0]}"]`);
    await page.waitForSelector(`table.tasks a[title="${fromLedger[1]}"]`);
    await listed(page, 2);
    await page.click('button:has-text("Cancel 2 open")');
    // nothing is cancelled before the confirmation
    expect(await serverStatus(serve.url, fromLedger[0]!)).toBe('working');
    await page.click('button:has-text("Yes, cancel them")');
    await page.waitForSelector('text=2 of 2 cancelled');
    for (const taskId of fromLedger) {
      await waitFor(
        `${taskId} to be cancelled on the server`,
        async () => ((await serverStatus(serve.url, taskId)) === 'cancelled' ? true : undefined),
        20_000,
      );
    }
    await listed(page, 0);

    const fromStore: string[] = [];
    for (let i = 0; i < 2; i += 1) {
      const created = await rpc(serve.url, 'tools/call', {
        name: 'export_report',
        arguments: { pages: 300, pageMs: 200 },
      });
      fromStore.push(created.result?.['taskId'] as string);
    }
    await page.goto(`${console_.url}#/store?tool=export_report&status=working`);
    await page.waitForSelector(`table.tasks tbody tr[data-id="${fromStore[0]}"]`);
    await page.waitForSelector(`table.tasks tbody tr[data-id="${fromStore[1]}"]`);
    await listed(page, 2);
    await page.click('button:has-text("Cancel 2 open")');
    await page.click('button:has-text("Yes, cancel them")');
    await page.waitForSelector('text=2 of 2 cancelled');
    for (const taskId of fromStore) {
      await waitFor(
        `${taskId} to be cancelled by its server`,
        async () => ((await serverStatus(serve.url, taskId)) === 'cancelled' ? true : undefined),
        20_000,
      );
    }
  });

  it('resubmits a failed call after a confirmation: a new task on the server, linked both ways', async () => {
    await page.goto(`${console_.url}#/ledger?tool=flaky_upstream`);
    await listed(page, 1);
    const oldTaskId = await page.getAttribute('table.tasks td.id a', 'title');
    const oldId = await page.getAttribute('table.tasks tbody tr', 'data-id');
    await page.click('table.tasks td.id a');
    await page.click('button:has-text("Resubmit")');
    await page.click('button:has-text("Yes, resubmit")');
    // the page moves to the new record, which the server ran (and failed again, as flaky_upstream does)
    await page.waitForSelector('article.detail >> text=resubmitted from', { timeout: 20_000 });
    await page.waitForSelector('article.detail h2 .s-failed', { timeout: 20_000 });
    expect(page.url()).not.toMatch(new RegExp(`/${oldId}$`));
    expect(await page.textContent('article.detail')).toContain(`resubmitted from${oldId}`);
    const newId = decodeURIComponent(page.url().split('/').pop()!);
    await page.goto(`${console_.url}#/ledger/${encodeURIComponent(oldId!)}`);
    await page.waitForSelector(`article.detail >> text=resubmitted as${newId}`);
    await page.goto(`${console_.url}#/ledger?tool=flaky_upstream`);
    await listed(page, 2);
    const taskIds = await page.$$eval('table.tasks td.id a', (as) => as.map((a) => a.getAttribute('title')));
    expect(taskIds[1]).toBe(oldTaskId);
    expect(taskIds[0]).not.toBe(oldTaskId);
    expect(await serverStatus(serve.url, taskIds[0]!)).toBe('failed');
  });

  it('logged no error in the page all along', () => {
    expect(errors).toEqual([]);
  });
});

describe.skipIf(missing !== undefined)('the console at 100,000 stored records', () => {
  const ROWS = 100_000;
  const T0 = 1_790_000_000_000;
  let dir: string;
  let console_: ConsoleProcess;
  let page: Page;
  let errors: string[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-console-bulk-'));
    const ledger = join(dir, 'ledger.db');
    const store = join(dir, 'server.db');
    await new SqliteLedger(ledger).dispose();
    await new SqliteTaskStore(store).close();
    // rows written in SQL: 100,000 real calls would test the calls, not the listing
    const l = openDatabase(ledger);
    l.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})
      INSERT INTO submissions (record_id, endpoint, tool_name, arguments, arguments_digest, correlation_id, task_id,
        local_state, status, status_message, submitted_at, updated_at)
      SELECT printf('r-%06d', i), 'http://127.0.0.1:1/mcp', 'tool-' || (i % 10), '{"i":' || i || '}', 'd',
        'order-' || i, printf('t-%06d', i), CASE WHEN i % 100 = 0 THEN 'tracking' ELSE 'terminal' END,
        CASE WHEN i % 100 = 0 THEN 'working' WHEN i % 7 = 0 THEN 'failed' ELSE 'completed' END, 'step ' || i,
        ${T0} + i, ${T0} + i FROM n`);
    l.close();
    const s = openDatabase(store);
    s.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})
      INSERT INTO tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
        expires_at, poll_interval_ms, resumable)
      SELECT printf('task-%06d', i), 'principal-' || (i % 50), 'tool-' || (i % 20), '{}',
        CASE i % 5 WHEN 0 THEN 'working' WHEN 1 THEN 'input_required' WHEN 2 THEN 'completed'
          WHEN 3 THEN 'failed' ELSE 'cancelled' END, ${T0} + i, ${T0} + i, NULL, NULL, 1000, 0 FROM n`);
    s.close();
    console_ = await startConsole(['--ledger', ledger, '--store', store]);
    page = await browser.newPage();
    errors = collectErrors(page);
  }, 120_000);

  afterAll(async () => {
    await page?.close();
    await console_?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    // the source, then the first row's id and task id, and the first of the next page
    ['ledger', 'r-100000', 't-100000', 'r-099950'],
    ['store', 'task-100000', 'task-100000', 'task-099950'],
  ])(
    'lists the newest of a %s’s 100,000 records in under a second, and the next page',
    async (source, id, taskId, next) => {
      // one load to warm the browser's cache of the page's own files: what is timed is the listing
      await page.goto(`${console_.url}#/${source}`);
      await page.waitForSelector('table.tasks tbody tr');
      const started = Date.now();
      await page.reload();
      await page.waitForSelector('table.tasks tbody tr');
      const listed = Date.now() - started;
      expect(listed, `listed in ${listed} ms`).toBeLessThan(1_000);
      const ids = await page.$$eval('table.tasks tbody tr', (trs) => trs.map((tr) => tr.getAttribute('data-id')));
      expect(ids).toHaveLength(50);
      expect(ids[0]).toBe(id);
      expect(await page.getAttribute('table.tasks td.id a >> nth=0', 'title')).toBe(taskId);
      await page.waitForSelector(`.counts >> text=all ${ROWS}`);
      const older = Date.now();
      await page.click('button:has-text("Older")');
      await page.waitForSelector(`table.tasks tbody tr[data-id="${next}"]`);
      const paged = Date.now() - older;
      expect(paged, `the next page in ${paged} ms`).toBeLessThan(1_000);
      expect(errors).toEqual([]);
    },
  );
});

describe.skipIf(missing !== undefined)('the console’s token and host checks', () => {
  const TOKEN = 'console-test-token-0123456789';
  let dir: string;
  let guarded: ConsoleProcess;
  let open: ConsoleProcess;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-console-token-'));
    const store = join(dir, 'server.db');
    await storeWith(store, [{ id: 'task-secret-1', tool: 'tool-a', status: 'working', at: 1 }]);
    // a token given on loopback is required as one made up for another interface is (cli consoleToken decides which)
    guarded = await startConsole(['--store', store, '--token', TOKEN]);
    open = await startConsole(['--store', store]);
  }, 60_000);

  afterAll(async () => {
    await guarded?.stop();
    await open?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints the link with the token, and refuses the page and the API without it', async () => {
    const link = new URL(guarded.url);
    expect(link.searchParams.get('token')).toBe(TOKEN);
    const base = `${link.origin}/`;
    for (const path of ['', 'api/config', 'api/store/tasks', 'api/store/tasks/task-secret-1', 'assets/main.js']) {
      const bare = await fetch(base + path);
      expect(bare.status, path).toBe(401);
      expect(await bare.text(), path).not.toContain('task-secret-1');
      const wrong = await fetch(base + path, { headers: { authorization: 'Bearer not-the-token-0123456789' } });
      expect(wrong.status, path).toBe(401);
    }
    const right = await fetch(`${base}api/store/tasks`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(right.status).toBe(200);
    expect(await right.text()).toContain('task-secret-1');
    // an action from another site's page is refused even with the token (the cookie would go along)
    const foreign = await fetch(`${base}api/store/tasks/task-secret-1/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, origin: 'http://evil.example', 'content-type': 'application/json' },
      body: '{}',
    });
    expect(foreign.status).toBe(403);
  });

  it('opens in the browser by the printed link only, and keeps the token out of the address bar', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const errors = collectErrors(page);
      const refused = await page.goto(new URL(guarded.url).origin + '/#/store');
      expect(refused?.status()).toBe(401);
      expect(await page.textContent('body')).toContain('needs its token');
      expect(await page.$('table.tasks')).toBeNull();
      await page.goto(guarded.url);
      await page.waitForSelector('table.tasks tbody tr[data-id="task-secret-1"]');
      expect(page.url()).not.toContain(TOKEN);
      // the 401 above is the browser's own console line for the refused page; the page itself logged nothing
      expect(errors.filter((line) => !line.includes('401'))).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it('without a token, answers only requests naming a loopback host (no DNS rebinding)', async () => {
    const { hostname, port } = new URL(open.url);
    const status = (host: string) =>
      new Promise<number>((resolve, reject) => {
        request({ hostname, port, path: '/api/store/tasks', headers: { host } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
          .on('error', reject)
          .end();
      });
    expect(await status(`127.0.0.1:${port}`)).toBe(200);
    expect(await status(`localhost:${port}`)).toBe(200);
    expect(await status(`evil.example:${port}`)).toBe(403);
  });
});

describe.skipIf(missing !== undefined)('the console’s trace link', () => {
  const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
  // a trace viewer nobody runs: the page only renders the link, and the test never follows it
  const TEMPLATE = 'http://127.0.0.1:16686/trace/{traceId}';
  let dir: string;
  let linked: ConsoleProcess;
  let plain: ConsoleProcess;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-console-trace-'));
    const path = join(dir, 'server.db');
    // a task created by a tools/call that carried this trace context
    const store = new SqliteTaskStore(path);
    try {
      await store.create(
        newTask(Date.now(), {
          taskId: 'task-traced',
          toolName: 'tool-a',
          traceContext: { traceparent: `00-${TRACE_ID}-00f067aa0ba902b7-01` },
        }),
      );
    } finally {
      await store.close();
    }
    linked = await startConsole(['--store', path, '--trace-link', TEMPLATE]);
    plain = await startConsole(['--store', path]);
  }, 60_000);

  afterAll(async () => {
    await linked?.stop();
    await plain?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Opens the task's detail on `console_`'s page and returns its trace id's value, and every request to the viewer. */
  async function traceFact(console_: ConsoleProcess, page: Page) {
    const viewer: string[] = [];
    page.on('request', (sent) => {
      if (new URL(sent.url()).port === '16686') viewer.push(sent.url());
    });
    await page.goto(`${console_.url}#/store/task-traced`);
    await page.waitForSelector('article.detail h2 >> text=tool-a');
    return { fact: page.locator('dl.facts dt:text-is("trace id") + dd'), viewer };
  }

  it('links the trace id to the viewer, the task’s real trace id in the template', async () => {
    const page = await browser.newPage();
    const errors = collectErrors(page);
    try {
      const { fact, viewer } = await traceFact(linked, page);
      const link = fact.locator('a');
      expect(await link.count()).toBe(1);
      expect(await link.getAttribute('href')).toBe(`http://127.0.0.1:16686/trace/${TRACE_ID}`);
      expect((await link.textContent())?.trim()).toBe(TRACE_ID);
      // rendered, never fetched nor followed
      expect(viewer).toEqual([]);
      expect(page.url()).toBe(`${linked.url}#/store/task-traced`);
      expect(errors).toEqual([]);
    } finally {
      await page.close();
    }
  });

  it('shows the trace id as text, with no link, when no template is given', async () => {
    const page = await browser.newPage();
    const errors = collectErrors(page);
    try {
      const { fact, viewer } = await traceFact(plain, page);
      expect((await fact.textContent())?.trim()).toBe(TRACE_ID);
      expect(await fact.locator('a').count()).toBe(0);
      expect(await page.locator('article.detail a[href*="16686"]').count()).toBe(0);
      expect(viewer).toEqual([]);
      expect(errors).toEqual([]);
    } finally {
      await page.close();
    }
  });
});

describe.skipIf(missing !== undefined)('from `closeout demo --keep` to its console', () => {
  let kept: string | undefined;
  let console_: ConsoleProcess | undefined;

  afterAll(async () => {
    await console_?.stop();
    if (kept) rmSync(kept, { recursive: true, force: true });
  });

  it('runs the one command the demo prints, and the page lists the demo’s tasks from its ledger and its store', async () => {
    const demo = await runCli(['demo', '--keep'], { timeoutMs: 90_000 });
    expect(demo.code, demo.stderr).toBe(0);
    kept = /^kept (\S+) /m.exec(demo.stdout)?.[1];
    const command = /^closeout console (.+)$/m.exec(demo.stdout)?.[1];
    expect(command, demo.stdout).toBeDefined();
    console_ = await startConsole(command!.trim().split(/\s+/));
    for (const source of ['ledger', 'store']) {
      // a page of its own for each: a hash change on one page could still show the other source's rows
      const page = await browser.newPage();
      const errors = collectErrors(page);
      try {
        await page.goto(`${console_.url}#/${source}`);
        await page.waitForSelector('table.tasks tbody tr');
        expect(await page.textContent('nav.sources [aria-current="page"]')).toBe(
          source === 'ledger' ? 'Client ledger' : 'Server store',
        );
        expect(await rows(page), source).toContainEqual({ status: 'completed', tool: 'batch_job' });
        expect(errors).toEqual([]);
      } finally {
        await page.close();
      }
    }
  }, 120_000);
});

describe.skipIf(missing !== undefined)('createConsoleHandler mounted in an Express app', () => {
  let dir: string;
  let store: SqliteTaskStore;
  let server: Server;
  let base: string;
  let close: () => Promise<void>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'closeout-console-express-'));
    const path = join(dir, 'server.db');
    await storeWith(path, [{ id: 'task-in-express', tool: 'tool-a', status: 'working', at: 1 }]);
    store = new SqliteTaskStore(path);
    // the built package's entry point, as an application imports it: the page's files are in dist
    const entry = pathToFileURL(join(import.meta.dirname, '../../dist/console/index.js')).href;
    const { createConsoleHandler } = (await import(entry)) as {
      createConsoleHandler: (options: ConsoleOptions) => ConsoleHandler;
    };
    const handler = createConsoleHandler({ store, storeShown: 'the app’s store' });
    close = () => handler.close();
    const app = express();
    app.use('/ops/console', handler);
    app.get('/', (_req, res) => res.send('the app itself'));
    server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }, 60_000);

  afterAll(async () => {
    await close?.();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the console under its prefix, live, next to the app’s own routes', async () => {
    const page = await browser.newPage();
    const errors = collectErrors(page);
    try {
      // without the trailing slash the page's relative links would miss the prefix: it is redirected to it
      await page.goto(`${base}/ops/console`);
      expect(new URL(page.url()).pathname).toBe('/ops/console/');
      await page.waitForSelector('table.tasks tbody tr[data-id="task-in-express"]');
      expect(await page.textContent('header')).toContain('the app’s store');
      expect(await (await fetch(`${base}/`)).text()).toBe('the app itself');
      // a change to the store shows without a reload (the live stream goes through Express too)
      const writer = openDatabase(join(dir, 'server.db'));
      try {
        addTasks(writer, [{ id: 'task-added-later', tool: 'tool-b', status: 'completed', at: 2 }]);
      } finally {
        writer.close();
      }
      await page.waitForSelector('table.tasks tbody tr[data-id="task-added-later"]', { timeout: 10_000 });
      expect(await rows(page)).toEqual([
        { status: 'completed', tool: 'tool-b' },
        { status: 'working', tool: 'tool-a' },
      ]);
      expect(errors).toEqual([]);
    } finally {
      await page.close();
    }
  });
});
