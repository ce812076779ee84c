/**
 * The operators' listing (query.ts) on the PostgreSQL store: the listing indexes are made by the store's migration
 * 12, and the idempotency key's unique index is led by the key since 13. Each call is one statement, so it reads one
 * snapshot.
 */
import type pg from 'pg';

import type { SummaryColumns } from '../taskRows.js';
import { toTaskSummary } from '../taskRows.js';
import type { ListingDialect, TaskCounts, TaskListPage, TaskListQuery } from './query.js';
import { countStatement, listStatement, toCounts, toPage } from './query.js';

const POSTGRES: ListingDialect = {
  table: 'closeout_tasks',
  placeholder: (n) => `$${n}`,
  // the database's collation may order by language rules, where a prefix is no range: "C" compares bytes, and
  // closeout_tasks_listing_task_id indexes the id in it
  taskIdInCodePointOrder: 'task_id COLLATE "C"',
  // its planner has statistics, and weighs the status against the other filters itself
  statusChecked: 'status',
};

export function postgresListStatement(query: TaskListQuery): ReturnType<typeof listStatement> {
  return listStatement(query, POSTGRES);
}

export function postgresCountStatement(query: TaskListQuery): ReturnType<typeof countStatement> {
  return countStatement(query, POSTGRES);
}

/** One page of the tasks `query` selects, newest first. */
export async function listPostgresTasks(pool: pg.Pool, query: TaskListQuery): Promise<TaskListPage> {
  const { text, values, limit } = postgresListStatement(query);
  const { rows } = await pool.query<SummaryColumns>(text, values);
  return toPage(rows.map(toTaskSummary), limit);
}

/** How many tasks of each status `query` selects. */
export async function countPostgresTasks(pool: pg.Pool, query: TaskListQuery): Promise<TaskCounts> {
  const { text, values } = postgresCountStatement(query);
  const { rows } = await pool.query<{ status: never; n: string }>(text, values);
  return toCounts(rows);
}
