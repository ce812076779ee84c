// README.md shows each way of seeing the tasks as the CLI really shows it: both console screenshots (list and detail)
// are linked and exist; the `closeout tasks` sample is the table and counts line the command renders for those rows;
// every `closeout serve:` line of README.md and docs/cli.md has the shape of a line serve logs (serveActivity.ts).
// (That README's `closeout tools` sample is lines the command prints is test/e2e/cliTools.test.ts; that its `closeout
// call` sample and docs/cli.md's are, test/e2e/cliSamples.test.ts.)
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import pc from 'picocolors';
import { describe, expect, it } from 'vitest';

import { activityLine, startLine, stopLine } from '../src/cli/commands/serveActivity.js';
import { countsLine, summaryTable } from '../src/cli/terminal/storeTaskView.js';
import type { TaskStatus } from '../src/protocol/index.js';
import { TASK_STATUSES } from '../src/protocol/status.js';
import type { TaskSummary } from '../src/server/store/listing/query.js';
import type { TaskActivity } from '../src/server/taskServerOptions.js';
import { sampleAfter } from './support/docSamples.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const CLI_DOC = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');

/** A task id, a tool, durations and counts made alike: what is left is the line's shape. */
function shape(line: string): string {
  return line
    .trim()
    .replace(/task [\w-]{32}(?= )/, 'task <id>')
    .replace(/\d+(\.\d)?m?s after creation/, '<duration> after creation')
    .replace(/\(\w+([,)])/, '(<tool>$1')
    .replace(/\b\d+\b/g, '<n>');
}

/** Every line `closeout serve` logs in text, in each of its shapes. */
function loggedShapes(): Set<string> {
  const task = { taskId: 'x'.repeat(32), tool: 'batch_job' };
  const activities: TaskActivity[] = [
    { type: 'created', ...task },
    ...(['completed', 'failed', 'cancelled'] as const).flatMap((status) =>
      [200, 1300].map((durationMs) => ({ type: 'finished' as const, ...task, status, attempt: 2, durationMs })),
    ),
    ...(['rerun', 'interrupted', 'cancelled', 'continued'] as const).map((outcome) => ({
      type: 'taken-over' as const,
      ...task,
      outcome,
    })),
    ...[1, 2].flatMap((count) => [
      { type: 'expired' as const, count },
      { type: 'purged' as const, count },
    ]),
  ];
  return new Set(
    [
      ...activities.map((activity) => activityLine(activity, 'text')),
      ...[0, 1, 2].flatMap((n) => [startLine(n, 'text'), stopLine(n, 'text')]),
    ].map(shape),
  );
}

describe('README’s samples of the console, `closeout tasks` and `closeout serve`', () => {
  it('links both console screenshots, the list and the detail, and ships them', () => {
    for (const image of ['docs/console-list.png', 'docs/console-detail.png']) {
      expect(README).toContain(`](${image})`);
      expect(existsSync(join(ROOT, image)), image).toBe(true);
    }
  });

  it('shows `closeout tasks` as it renders those rows: the table, then the counts of the store', () => {
    const sample = sampleAfter(README, 'npx closeout tasks');
    const now = Date.UTC(2026, 11, 1);
    const tasks: TaskSummary[] = sample.slice(1, -1).map((row) => {
      const [taskId, toolName, status, principal, age, attempt, ...message] = row.split(/ {2,}/);
      return {
        taskId: taskId!,
        principal: principal!,
        toolName: toolName!,
        status: status as TaskStatus,
        statusMessage: message.join('  ') || undefined,
        createdAt: now - Math.round(Number.parseFloat(age!) * 1000),
        lastUpdatedAt: now,
        ttlMs: 3_600_000,
        attempt: Number(attempt),
        cancelRequested: false,
        leaseHolder: undefined,
        leaseExpiresAt: undefined,
      };
    });
    expect(tasks.length).toBeGreaterThan(1);
    const plain = pc.createColors(false);
    expect(sample.slice(0, -1)).toEqual(summaryTable(tasks, plain, now));
    const counts = Object.fromEntries(
      TASK_STATUSES.map((status) => [status, tasks.filter((task) => task.status === status).length]),
    ) as Record<TaskStatus, number>;
    expect(sample.at(-1)).toBe(`${countsLine(counts, plain)} (${tasks.length} tasks in ./closeout-server.db)`);
  });

  it('shows only lines `closeout serve` logs, in README and in docs/cli.md', () => {
    const shapes = loggedShapes();
    const shown = [README, CLI_DOC].flatMap((page) =>
      page.split('\n').filter((line) => /^\s*closeout serve: /.test(line) && !line.includes('`')),
    );
    expect(shown.filter((line) => line.includes('expired')).length).toBeGreaterThan(0);
    for (const line of shown) expect(shapes, line).toContain(shape(line));
  });
});
