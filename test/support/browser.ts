/**
 * A real browser for the console's tests: Debian's Chromium (installed by scripts/install-test-tools.sh, which
 * `npm test` runs first) driven by playwright-core. When it is missing the script is run once more here; only a
 * machine where it still cannot be installed skips, saying why. And `closeout console` as a child process.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import type { Browser, Page } from 'playwright-core';
import { chromium } from 'playwright-core';

import { type ServeProcess, startListening } from './processes.js';

const INSTALL = fileURLToPath(new URL('../../scripts/install-test-tools.sh', import.meta.url));

function chromiumPath(): string | undefined {
  const given = process.env['CHROMIUM_PATH'];
  if (given) return existsSync(given) ? given : undefined;
  for (const name of ['chromium', 'chromium-browser']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || undefined;
    } catch {
      // not this name
    }
  }
  return undefined;
}

let found: { path: string } | { missing: string } | undefined;

/** Chromium's path, installing it first when missing; else why it cannot be had (the tests then skip, saying so). */
export function findChromium(): { path: string } | { missing: string } {
  if (found) return found;
  let path = chromiumPath();
  if (!path) {
    try {
      execFileSync('bash', [INSTALL], { stdio: 'pipe', timeout: 600_000 });
    } catch (error) {
      const why = (error as { stderr?: Buffer }).stderr?.toString().trim() || String(error);
      found = { missing: `chromium is not installed and ${INSTALL} could not install it: ${why}` };
      return found;
    }
    path = chromiumPath();
  }
  found = path ? { path } : { missing: `chromium is not installed and ${INSTALL} did not install it` };
  return found;
}

export async function launchChromium(path: string): Promise<Browser> {
  // --no-sandbox: CI runs the tests as root, where Chromium's sandbox refuses to start
  return chromium.launch({ executablePath: path, args: ['--no-sandbox', '--disable-gpu'] });
}

/** Every error the page logs or throws, for the test that asserts there are none. */
export function collectErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(`${message.text()} (${message.location().url})`);
  });
  page.on('pageerror', (error) => errors.push(String(error)));
  return errors;
}

/** A running `closeout console`: its `url` is the link it printed (with its token when it requires one). */
export type ConsoleProcess = ServeProcess;

/** Starts `closeout console --port 0 ARGS` and resolves with the link it prints. */
export function startConsole(args: string[], timeoutMs = 20_000): Promise<ConsoleProcess> {
  return startListening('console', args, timeoutMs, { NO_COLOR: '1' });
}
