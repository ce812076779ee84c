/** The console samples of README.md and docs/*.md, read as the tests that keep them true compare them. */
import { expect } from 'vitest';

/**
 * The lines of the first code block of `page` that follows the line `$ COMMAND` (or a `$ ` line whose command matches
 * `command`, a pattern), the command line left out.
 */
export function sampleAfter(page: string, command: string | RegExp): string[] {
  const lines = page.split('\n');
  const at = lines.findIndex((line) => {
    const shown = line.trim();
    if (!shown.startsWith('$ ')) return false;
    return typeof command === 'string' ? shown === `$ ${command}` : command.test(shown.slice(2));
  });
  expect(at, `a sample of \`${String(command)}\``).toBeGreaterThan(0);
  const end = lines.findIndex((line, i) => i > at && line.trim().startsWith('```'));
  return lines.slice(at + 1, end);
}
