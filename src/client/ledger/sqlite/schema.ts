/** The SQLite ledger's schema: its migrations, one per version (sqliteLedger.ts opens the file with them). */
import type Database from 'better-sqlite3';

import type { Migration } from '../../../shared/sqlite/sqliteFile.js';

/**
 * Versioned migrations: entry i brings `user_version` from i to i + 1. Never edit a shipped entry; append. Its status
 * set stays written out, and test/server/store/statusSql.test.ts fails when it no longer matches the status machine.
 */
export const MIGRATIONS: readonly Migration[] = [
  `CREATE TABLE submissions (
     record_id           TEXT PRIMARY KEY,
     endpoint            TEXT NOT NULL,
     tool_name           TEXT NOT NULL,
     arguments           TEXT NOT NULL,
     arguments_digest    TEXT NOT NULL,
     correlation_id      TEXT,
     idempotency_key     TEXT,
     task_id             TEXT,
     local_state         TEXT NOT NULL CHECK (local_state IN
                           ('submitting','tracking','terminal','expired','unknown-outcome','detached')),
     status              TEXT CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message      TEXT,
     created_at          TEXT,    -- server time, ISO 8601 as sent
     last_updated_at     TEXT,    -- server time, ISO 8601 as sent
     ttl_ms              INTEGER, -- NULL with a task_id: unlimited
     poll_interval_ms    INTEGER,
     submitted_at        INTEGER NOT NULL, -- local epoch ms from here on
     sent_at             INTEGER,
     last_poll_at        INTEGER,
     next_poll_at        INTEGER,
     last_error          TEXT,    -- JSON RecordedError
     result              TEXT,    -- JSON CallToolResult
     error               TEXT,    -- JSON JSON-RPC error
     terminal_reason     TEXT,
     terminal_at         INTEGER,
     cancel_requested_at INTEGER,
     resubmitted_from    TEXT REFERENCES submissions (record_id),
     -- deferred: a resubmission supersedes the old record before the new one (which may reuse its key) exists
     superseded_by       TEXT REFERENCES submissions (record_id) DEFERRABLE INITIALLY DEFERRED,
     lease_owner         TEXT,
     lease_expires_at    INTEGER,
     updated_at          INTEGER NOT NULL
   );
   -- a taskId names one task of one server
   CREATE UNIQUE INDEX submissions_task ON submissions (endpoint, task_id) WHERE task_id IS NOT NULL;
   -- one current submission per endpoint and idempotency key; an explicit resubmission supersedes the old one
   CREATE UNIQUE INDEX submissions_idempotency ON submissions (endpoint, idempotency_key)
     WHERE idempotency_key IS NOT NULL AND superseded_by IS NULL;
   -- resume only ever looks at open records
   CREATE INDEX submissions_open ON submissions (endpoint, local_state)
     WHERE local_state IN ('submitting','tracking','detached');

   CREATE TABLE status_history (
     seq               INTEGER PRIMARY KEY AUTOINCREMENT,
     record_id         TEXT NOT NULL REFERENCES submissions (record_id),
     task_id           TEXT,
     status            TEXT,
     status_message    TEXT,
     local_state       TEXT NOT NULL,
     server_updated_at TEXT,
     observed_at       INTEGER NOT NULL,
     note              TEXT
   );
   CREATE INDEX status_history_record ON status_history (record_id, seq);
   -- the audit trail is append-only (S15)
   CREATE TRIGGER status_history_no_update BEFORE UPDATE ON status_history
     BEGIN SELECT RAISE(ABORT, 'status_history is append-only'); END;
   CREATE TRIGGER status_history_no_delete BEFORE DELETE ON status_history
     BEGIN SELECT RAISE(ABORT, 'status_history is append-only'); END;

   CREATE TABLE input_answers (
     record_id   TEXT NOT NULL REFERENCES submissions (record_id),
     key         TEXT NOT NULL,
     seq         INTEGER NOT NULL,
     request     TEXT NOT NULL,
     asked_at    INTEGER,
     response    TEXT,
     answered_at INTEGER,
     sent_at     INTEGER,
     PRIMARY KEY (record_id, key) -- keys are unique over a task's life (SEP-2663 "Task Update Requests")
   );`,
  // 2: clocks, credentials and keys (docs/DESIGN.md, rules 2 and 5)
  `-- how long this client has itself seen the task open, by its own monotonic clock, summed over its processes
   ALTER TABLE submissions ADD COLUMN observed_age_ms INTEGER;
   -- a keyed fingerprint of the credential the record was created under (never the credential itself)
   ALTER TABLE submissions ADD COLUMN credential TEXT;
   -- the idempotency key as sent (derived from idempotency_key with the ledger's secret); NULL: sent as it is
   ALTER TABLE submissions ADD COLUMN wire_idempotency_key TEXT;
   -- the ledger's own secret, written once by the first process that opens it
   CREATE TABLE ledger_secret (
     id     INTEGER PRIMARY KEY CHECK (id = 1),
     secret BLOB NOT NULL
   );`,
  // 2 -> 3: entry 0 was edited after it shipped (`superseded_by` became deferrable), so files written by the first
  // build kept an immediate reference and could not resubmit ("FOREIGN KEY constraint failed")
  deferSupersededBy,
  // 3 -> 4: the call's W3C trace context (and baggage), JSON: a process that resumes the record joins its trace
  // (docs/operations.md, "Observability")
  `ALTER TABLE submissions ADD COLUMN trace_context TEXT;`,
  // 4 -> 5: a holder renews its leases by writing its own row, not every record it holds (LEASE_UNTIL)
  `CREATE TABLE lease_holders (
     holder     TEXT PRIMARY KEY,
     expires_at INTEGER NOT NULL -- local epoch ms: the end of the holder's last renewal
   ) WITHOUT ROWID;`,
  // 5 -> 6: a process of a build before schema 5 that still has the file open claims on the record's own lease, which
  // a holder of this build no longer rewrites when it renews: its claim of a tracked record whose holder's row has not
  // run out on this host's clock (Ledger.now) is skipped, as this build's own claim (LEASE_UNTIL < now) skips it.
  // Only a claim moves a tracked record to another holder and keeps it tracked.
  `CREATE TRIGGER submissions_live_holder BEFORE UPDATE OF lease_owner ON submissions
     WHEN OLD.local_state = 'tracking' AND NEW.local_state = 'tracking'
       AND OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NOT NULL AND NEW.lease_owner <> OLD.lease_owner
       AND (SELECT expires_at FROM lease_holders WHERE holder = OLD.lease_owner) >= unixepoch('subsec') * 1000
     BEGIN SELECT RAISE(IGNORE); END;`,
  // 6 -> 7: a schedule note (Ledger.noteSchedule, one a waiting poll) writes a narrow row of its own, not the record's
  // whole row with its arguments, so its cost does not grow with what the call carries (bench/RESULTS.md, section 33).
  // The record's own columns stay: a build before schema 7 with the file still open writes there, and a read takes the
  // later time and the longer age of the two (RECORDS, SqliteLedger.toRecord).
  `CREATE TABLE schedule_notes (
     record_id          TEXT PRIMARY KEY REFERENCES submissions (record_id),
     noted_poll_at      INTEGER, -- local epoch ms: the last poll that got an answer
     noted_next_poll_at INTEGER, -- the next poll planned; NULL: none; read only while the record is tracked
     noted_age_ms       INTEGER  -- observed_age_ms, never lowered
   ) WITHOUT ROWID;
   -- a record that stops being tracked has no next poll (as the statements that end it clear next_poll_at)
   CREATE TRIGGER schedule_notes_untracked AFTER UPDATE OF local_state ON submissions
     WHEN NEW.local_state <> 'tracking'
     BEGIN UPDATE schedule_notes SET noted_next_poll_at = NULL WHERE record_id = NEW.record_id; END;`,
  // 7 -> 8: the records listed for people (recordListing.ts), newest first: all of them, within a local state and
  // status, within a tool; and found by task id prefix, correlation id or idempotency key, whatever the server
  `CREATE INDEX submissions_listing ON submissions (submitted_at, record_id);
   CREATE INDEX submissions_listing_state ON submissions (local_state, status, submitted_at, record_id);
   CREATE INDEX submissions_listing_tool ON submissions (tool_name, submitted_at, record_id);
   CREATE INDEX submissions_listing_task ON submissions (task_id);
   CREATE INDEX submissions_listing_correlation ON submissions (correlation_id);
   CREATE INDEX submissions_listing_key ON submissions (idempotency_key);`,
];

/** The ledger schema version this build writes. */
export const LEDGER_SCHEMA_VERSION = MIGRATIONS.length;

/**
 * Rebuild `submissions` from its own stored definition with `superseded_by` deferred, whatever columns later steps
 * added; a file that has the deferred reference already is left as it is.
 */
function deferSupersededBy(db: Database.Database): void {
  const immediate = /(superseded_by\s+TEXT\s+REFERENCES\s+submissions\s*\(\s*record_id\s*\))(?!\s*DEFERRABLE)/i;
  const { sql } = db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'submissions'`).get() as {
    sql: string;
  };
  if (!immediate.test(sql)) return;
  const indexes = db
    .prepare(`SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'submissions' AND sql IS NOT NULL`)
    .all() as { sql: string }[];
  const rebuilt = sql
    .replace(/^CREATE TABLE submissions\b/i, 'CREATE TABLE submissions_rebuilt')
    .replace(immediate, '$1 DEFERRABLE INITIALLY DEFERRED');
  db.exec(rebuilt);
  db.exec(`INSERT INTO submissions_rebuilt SELECT * FROM submissions;
           DROP TABLE submissions;
           ALTER TABLE submissions_rebuilt RENAME TO submissions;`);
  for (const index of indexes) db.exec(index.sql);
}
