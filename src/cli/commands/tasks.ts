/**
 * `closeout tasks`: the tasks a server store holds, every principal's, newest first, with counts per status, for the
 * operator (the store's listing, src/server/store/listing; never served over MCP). `closeout task show` has one.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';

import type { TaskStatus } from '../../protocol/index.js';
import { TASK_STATUSES } from '../../protocol/status.js';
import type { TaskListQuery } from '../../server/store/listing/query.js';
import { TaskListQueryError } from '../../server/store/listing/query.js';
import { DEFAULT_LISTING_LIMIT, MAX_LISTING_LIMIT } from '../../shared/listingPages.js';
import { CliError } from '../cliError.js';
import type { JsonFlags } from '../commonOptions.js';
import { addJsonOption } from '../commonOptions.js';
import { addStoreOption, openStoreToRead, type StoreFlags } from '../storeOpen.js';
import { Output } from '../terminal/output.js';
import { countsLine, summaryJson, summaryTable } from '../terminal/storeTaskView.js';

interface TasksFlags extends JsonFlags, StoreFlags {
  status?: TaskStatus[];
  tool?: string;
  principal?: string;
  prefix?: string;
  idempotencyKey?: string;
  since?: number;
  before?: number;
  limit: number;
  cursor?: string;
}

export function registerTasks(program: Command): void {
  const command = program
    .command('tasks')
    .description('List the tasks a server store holds, every caller’s, newest first, with counts per status')
    .option(
      '--status <status>',
      `only tasks in this status (repeatable, or comma-separated): ${TASK_STATUSES.join(', ')}`,
      collectStatuses,
    )
    .option('--tool <name>', 'only tasks of this tool')
    .option('--principal <principal>', 'only tasks of this caller (the principal its token maps to)')
    .option('--prefix <taskId>', 'only tasks whose id starts with this')
    .option('--idempotency-key <key>', 'only the tasks created with this idempotency key (one per caller at most)')
    .option('--since <time>', 'only tasks created at or after this time (ISO 8601, or ms since the epoch)', parseTime)
    .option('--before <time>', 'only tasks created before this time (ISO 8601, or ms since the epoch)', parseTime)
    .option(`--limit <n>`, `tasks per page, 1 to ${MAX_LISTING_LIMIT}`, parseLimit, DEFAULT_LISTING_LIMIT)
    .option('--cursor <cursor>', 'the next page: the cursor the previous page printed');
  addStoreOption(command);
  addJsonOption(command, 'print one JSON document: {"store", "counts", "tasks": [...], "nextCursor"}');
  command.action(async (flags: TasksFlags) => {
    const out = new Output({ json: flags.json });
    const query: TaskListQuery = {
      status: flags.status,
      toolName: flags.tool,
      principal: flags.principal,
      taskIdPrefix: flags.prefix,
      idempotencyKey: flags.idempotencyKey,
      createdFrom: flags.since,
      createdBefore: flags.before,
      limit: flags.limit,
      cursor: flags.cursor,
    };
    const { store, shown } = await openStoreToRead(flags.store);
    try {
      if (!store.listTasks || !store.countTasks) throw new CliError(`the store at ${shown} cannot list its tasks`);
      const [page, counts] = await Promise.all([store.listTasks(query), store.countTasks(query)]).catch((error) => {
        // a cursor mangled in a copy, say: one line naming the option
        if (error instanceof TaskListQueryError) throw new CliError(`bad listing: ${error.message}`);
        throw error;
      });
      const now = store.now?.() ?? Date.now();
      out.event({
        store: shown,
        counts,
        tasks: page.tasks.map(summaryJson),
        nextCursor: page.nextCursor ?? null,
      });
      const total = TASK_STATUSES.reduce((sum, status) => sum + counts[status], 0);
      if (page.tasks.length === 0) out.line(`no tasks${flags.cursor ? ' after this cursor' : ''} in ${shown}`);
      else for (const line of summaryTable(page.tasks, out.c, now)) out.line(line);
      out.line(`${countsLine(counts, out.c)}${out.c.dim(` (${total} ${total === 1 ? 'task' : 'tasks'} in ${shown})`)}`);
      if (page.nextCursor !== undefined) {
        out.line(out.c.dim(`more: the same command with --cursor ${page.nextCursor}`));
      }
    } finally {
      await store.close();
    }
  });
}

function collectStatuses(value: string, previous: TaskStatus[] | undefined): TaskStatus[] {
  const statuses = value.split(',').map((status) => status.trim());
  for (const status of statuses) {
    if (!TASK_STATUSES.includes(status as TaskStatus)) {
      throw new InvalidArgumentError(`expected ${TASK_STATUSES.join(', ')}`);
    }
  }
  return [...(previous ?? []), ...(statuses as TaskStatus[])];
}

function parseTime(value: string): number {
  const ms = /^\d+$/.test(value) ? Number(value) : Date.parse(value);
  if (!Number.isSafeInteger(ms)) throw new InvalidArgumentError('expected an ISO 8601 time or ms since the epoch');
  return ms;
}

function parseLimit(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > MAX_LISTING_LIMIT) {
    throw new InvalidArgumentError(`expected an integer from 1 to ${MAX_LISTING_LIMIT}`);
  }
  return n;
}
