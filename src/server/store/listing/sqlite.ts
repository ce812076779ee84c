/**
 * The operators' listing (query.ts) on the SQLite store: the tasks table's listing indexes are made by the store's
 * schema (version 11; the idempotency key's unique index is led by the key since 12), and every statement reads from
 * one snapshot of the file.
 */
import type Database from 'better-sqlite3';

import type { SummaryColumns } from '../taskRows.js';
import { toTaskSummary } from '../taskRows.js';
import type { ListingDialect, TaskCounts, TaskListPage, TaskListQuery } from './query.js';
import { countStatement, listStatement, toCounts, toPage } from './query.js';

const SQLITE: ListingDialect = {
  table: 'tasks',
  // named: a value is used by each status's branch
  placeholder: (n) => `@p${n}`,
  // the primary key's own index, in BINARY collation: UTF-8 bytes, code point order
  taskIdInCodePointOrder: 'task_id',
  // unary +: a term no index is used for
  statusChecked: '+status',
};

/** The statement's values as better-sqlite3 binds named parameters. */
function named(values: unknown[]): Record<string, unknown> {
  return Object.fromEntries(values.map((value, i) => [`p${i + 1}`, value]));
}

export function sqliteListStatement(query: TaskListQuery): ReturnType<typeof listStatement> {
  return listStatement(query, SQLITE);
}

export function sqliteCountStatement(query: TaskListQuery): ReturnType<typeof countStatement> {
  return countStatement(query, SQLITE);
}

/** One page of the tasks `query` selects, newest first. */
export function listSqliteTasks(db: Database.Database, query: TaskListQuery): TaskListPage {
  const { text, values, limit } = sqliteListStatement(query);
  return toPage((db.prepare(text).all(named(values)) as SummaryColumns[]).map(toTaskSummary), limit);
}

/** How many tasks of each status `query` selects. */
export function countSqliteTasks(db: Database.Database, query: TaskListQuery): TaskCounts {
  const { text, values } = sqliteCountStatement(query);
  return toCounts(db.prepare(text).all(named(values)) as Array<{ status: never; n: number }>);
}

/** The plan SQLite picks for a statement (`EXPLAIN QUERY PLAN`), one detail line per step: for the tests. */
export function sqlitePlan(db: Database.Database, statement: { text: string; values: unknown[] }): string[] {
  return (
    db.prepare(`EXPLAIN QUERY PLAN ${statement.text}`).all(named(statement.values)) as Array<{ detail: string }>
  ).map((row) => row.detail);
}
