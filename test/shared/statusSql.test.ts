// The status machine (src/protocol/status.ts) is the one source of the status sets the SQL of both halves uses: the
// queries take theirs from src/shared/statusSql.ts, and the shipped schemas (written out, since shipped migrations never
// change) must list the same sets. A status added to the machine but not to a schema fails here.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/ledger/sqliteLedger.js';
import { TaskStatusSchema } from '../../src/protocol/schemas.js';
import {
  canTransition,
  isTerminalStatus,
  OPEN_STATUSES,
  TASK_STATUSES,
  TERMINAL_STATUSES,
} from '../../src/protocol/status.js';
import { MIGRATIONS as POSTGRES_MIGRATIONS } from '../../src/server/store/postgres/schema.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { ANY_STATUS_SQL, OPEN_STATUS_SQL, TERMINAL_STATUS_SQL } from '../../src/shared/statusSql.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-status-sql-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every `status IN (...)` of an SQL text, each as its list of statuses. */
function statusSets(sql: string): string[][] {
  return [...sql.matchAll(/\bstatus IN \(([^)]*)\)/g)].map((match) =>
    match[1]!.split(',').map((literal) => literal.trim().replace(/^'(.*)'$/, '$1')),
  );
}

/** The schema a fresh SQLite file holds once `open` has created it: every table, index and trigger, as stored. */
function sqliteSchema(open: (path: string) => { dispose: () => Promise<void> }, file: string) {
  const path = join(dir, file);
  const opened = open(path);
  const db = openDatabase(path, { readonly: true });
  try {
    return {
      db,
      objects: db.prepare(`SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL`).all() as {
        type: string;
        name: string;
        sql: string;
      }[],
      done: async () => {
        db.close();
        await opened.dispose();
      },
    };
  } catch (error) {
    db.close();
    throw error;
  }
}

/** A schema's status sets agree with the machine: a CHECK allows every status, a partial index names its set. */
function expectSchemaMatchesMachine(objects: { type: string; name: string; sql: string }[]) {
  const checks = objects.filter((o) => o.type === 'table' && /CHECK \(status IN/.test(o.sql));
  expect(checks.length).toBeGreaterThan(0);
  for (const table of checks) expect(table.sql, table.name).toContain(`CHECK (${ANY_STATUS_SQL})`);
  for (const index of objects.filter((o) => o.type === 'index' && /\bstatus IN/.test(o.sql))) {
    // a partial index serves a query only when the query repeats its predicate: the very text statusSql.ts builds
    const expected = /_open_/.test(index.name) ? OPEN_STATUS_SQL : TERMINAL_STATUS_SQL;
    expect(index.sql, index.name).toContain(expected);
  }
  for (const set of objects.flatMap((o) => statusSets(o.sql))) {
    expect([[...TASK_STATUSES], [...OPEN_STATUSES], [...TERMINAL_STATUSES]]).toContainEqual(set);
  }
}

describe('the status machine', () => {
  it('knows the statuses of the wire schema, each open or terminal and never both', () => {
    expect([...TASK_STATUSES]).toEqual(TaskStatusSchema.options);
    expect([...OPEN_STATUSES, ...TERMINAL_STATUSES].sort()).toEqual([...TASK_STATUSES].sort());
    for (const status of TASK_STATUSES) {
      expect(isTerminalStatus(status)).toBe(TERMINAL_STATUSES.includes(status));
      expect(isTerminalStatus(status)).toBe(!OPEN_STATUSES.includes(status));
    }
  });

  it('lets an open task move anywhere and a terminal task nowhere', () => {
    for (const from of TASK_STATUSES) {
      for (const to of TASK_STATUSES) expect(canTransition(from, to), `${from} -> ${to}`).toBe(!isTerminalStatus(from));
    }
  });

  it('writes the SQL predicates from its sets', () => {
    expect(statusSets(OPEN_STATUS_SQL)).toEqual([[...OPEN_STATUSES]]);
    expect(statusSets(TERMINAL_STATUS_SQL)).toEqual([[...TERMINAL_STATUSES]]);
    expect(statusSets(ANY_STATUS_SQL)).toEqual([[...TASK_STATUSES]]);
  });
});

describe('the shipped schemas list the machine’s status sets', () => {
  it('SqliteTaskStore, and its queries use its partial indexes', async () => {
    const schema = sqliteSchema((path) => {
      const store = new SqliteTaskStore(path);
      return { dispose: () => store.close() };
    }, 'tasks.db');
    try {
      expectSchemaMatchesMachine(schema.objects);
      // INDEXED BY fails to prepare when the index cannot serve the query: the predicates must match to the letter
      const served = (index: string, where: string) =>
        schema.db.prepare(`SELECT task_id FROM tasks INDEXED BY ${index} WHERE ${where}`);
      expect(() => served('tasks_open_owner', `owner = 'p' AND ${OPEN_STATUS_SQL}`)).not.toThrow();
      expect(() => served('tasks_open_lease', `${OPEN_STATUS_SQL} AND lease_expires_at < 1`)).not.toThrow();
      expect(() => served('tasks_open_lease_owner', `${OPEN_STATUS_SQL} AND lease_owner = 'i'`)).not.toThrow();
      expect(() => served('tasks_open_expiry', `${OPEN_STATUS_SQL} AND expires_at <= 1`)).not.toThrow();
      expect(() => served('tasks_closed_expiry', `${TERMINAL_STATUS_SQL} AND expires_at <= 1`)).not.toThrow();
      expect(() =>
        served('tasks_closed_unlimited', `${TERMINAL_STATUS_SQL} AND expires_at IS NULL AND last_updated_at <= 1`),
      ).not.toThrow();
      // and the check above can fail: a predicate that differs in its text leaves the index unusable
      expect(() => served('tasks_open_owner', `owner = 'p' AND status IN ('input_required','working')`)).toThrow(
        /no query solution/,
      );
    } finally {
      await schema.done();
    }
  });

  it('SqliteLedger', async () => {
    const schema = sqliteSchema((path) => new SqliteLedger(path), 'ledger.db');
    try {
      expectSchemaMatchesMachine(schema.objects);
    } finally {
      await schema.done();
    }
  });

  it('PostgresTaskStore', () => {
    const objects = POSTGRES_MIGRATIONS.flatMap((migration) =>
      migration.split(';').map((statement) => {
        const created = /CREATE (?:UNIQUE )?(TABLE|INDEX) (\w+)/.exec(statement);
        return { type: created?.[1]?.toLowerCase() ?? 'other', name: created?.[2] ?? '', sql: statement };
      }),
    );
    expectSchemaMatchesMachine(objects);
  });
});
