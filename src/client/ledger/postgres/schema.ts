/** The PostgreSQL ledger's schema (postgresLedger.ts runs it through src/shared/postgres/migrations.ts). */

/** Versioned schema: entry i takes the database from version i to i + 1. Never edit a shipped entry; append. */
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE closeout_ledger_submissions (
     record_id            TEXT PRIMARY KEY,
     endpoint             TEXT NOT NULL, -- as the submitting process spelled it (a URL that reached the server)
     endpoint_identity    TEXT NOT NULL, -- endpointIdentity(endpoint): what every lookup matches on
     tool_name            TEXT NOT NULL,
     arguments            TEXT NOT NULL, -- JSON text
     arguments_digest     TEXT NOT NULL,
     correlation_id       TEXT,
     idempotency_key      TEXT,
     wire_idempotency_key TEXT,
     credential           TEXT, -- a keyed fingerprint, never the credential (docs/DESIGN.md rule 5)
     task_id              TEXT,
     local_state          TEXT NOT NULL CHECK (local_state IN
                            ('submitting','tracking','terminal','expired','unknown-outcome','detached')),
     status               TEXT CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message       TEXT,
     created_at           TEXT, -- server time, ISO 8601 as sent
     last_updated_at      TEXT, -- server time, ISO 8601 as sent
     ttl_ms               BIGINT, -- NULL with a task_id: unlimited
     poll_interval_ms     BIGINT,
     submitted_at         BIGINT NOT NULL, -- local epoch ms from here on
     sent_at              BIGINT,
     last_poll_at         BIGINT,
     next_poll_at         BIGINT,
     last_error           TEXT, -- JSON RecordedError
     result               TEXT, -- JSON CallToolResult
     error                TEXT, -- JSON JSON-RPC error
     terminal_reason      TEXT,
     terminal_at          BIGINT,
     cancel_requested_at  BIGINT,
     resubmitted_from     TEXT REFERENCES closeout_ledger_submissions (record_id),
     -- deferred: a resubmission supersedes the old record before the new one (which may reuse its key) exists
     superseded_by        TEXT REFERENCES closeout_ledger_submissions (record_id) DEFERRABLE INITIALLY DEFERRED,
     lease_owner          TEXT,
     lease_expires_at     BIGINT,
     updated_at           BIGINT NOT NULL,
     observed_age_ms      BIGINT
   );
   -- a taskId names one task of one server
   CREATE UNIQUE INDEX closeout_ledger_task ON closeout_ledger_submissions (endpoint_identity, task_id)
     WHERE task_id IS NOT NULL;
   -- one current submission per server and idempotency key: the arbiter of two workers' race (S16)
   CREATE UNIQUE INDEX closeout_ledger_idempotency ON closeout_ledger_submissions (endpoint_identity, idempotency_key)
     WHERE idempotency_key IS NOT NULL AND superseded_by IS NULL;
   -- resume and the settling of abandoned submissions only ever look at open records
   CREATE INDEX closeout_ledger_open ON closeout_ledger_submissions (endpoint_identity, local_state)
     WHERE local_state IN ('submitting','tracking','detached');
   -- renewing or freeing a worker's leases is one statement over its own rows (docs/DESIGN.md rule 8)
   CREATE INDEX closeout_ledger_lease_owner ON closeout_ledger_submissions (lease_owner)
     WHERE lease_owner IS NOT NULL;
   CREATE INDEX closeout_ledger_submitted ON closeout_ledger_submissions (submitted_at);

   CREATE TABLE closeout_ledger_status_history (
     seq               BIGSERIAL PRIMARY KEY,
     record_id         TEXT NOT NULL REFERENCES closeout_ledger_submissions (record_id),
     task_id           TEXT,
     status            TEXT,
     status_message    TEXT,
     local_state       TEXT NOT NULL,
     server_updated_at TEXT,
     observed_at       BIGINT NOT NULL,
     note              TEXT
   );
   CREATE INDEX closeout_ledger_status_history_record ON closeout_ledger_status_history (record_id, seq);
   -- the audit trail is append-only (S15)
   CREATE FUNCTION closeout_ledger_history_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     RAISE EXCEPTION 'closeout_ledger_status_history is append-only';
   END $$;
   CREATE TRIGGER closeout_ledger_status_history_no_change BEFORE UPDATE OR DELETE ON closeout_ledger_status_history
     FOR EACH ROW EXECUTE FUNCTION closeout_ledger_history_append_only();
   CREATE TRIGGER closeout_ledger_status_history_no_truncate BEFORE TRUNCATE ON closeout_ledger_status_history
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_ledger_history_append_only();

   CREATE TABLE closeout_ledger_input_answers (
     record_id   TEXT NOT NULL REFERENCES closeout_ledger_submissions (record_id),
     key         TEXT NOT NULL,
     seq         INTEGER NOT NULL,
     request     TEXT NOT NULL, -- JSON text
     asked_at    BIGINT,
     response    TEXT, -- JSON text
     answered_at BIGINT,
     sent_at     BIGINT,
     PRIMARY KEY (record_id, key) -- keys are unique over a task's life (SEP-2663 "Task Update Requests")
   );

   -- the ledger's own secret, written once by the first worker that needs it
   CREATE TABLE closeout_ledger_secret (
     id     INTEGER PRIMARY KEY CHECK (id = 1),
     secret BYTEA NOT NULL
   );`,
  // 1 -> 2: the call's W3C trace context (and baggage), JSON text: a worker that resumes the record joins its trace
  // (docs/operations.md, "Observability")
  `ALTER TABLE closeout_ledger_submissions ADD COLUMN trace_context TEXT;`,
  // 2 -> 3: the records listed for people (recordListing.ts), newest first: all of them, within a local state and
  // status, within a tool; and found by task id prefix (in byte order, "C", whatever the database's collation),
  // correlation id or idempotency key, whatever the server
  `CREATE INDEX closeout_ledger_listing ON closeout_ledger_submissions (submitted_at, record_id);
   CREATE INDEX closeout_ledger_listing_state
     ON closeout_ledger_submissions (local_state, status, submitted_at, record_id);
   CREATE INDEX closeout_ledger_listing_tool ON closeout_ledger_submissions (tool_name, submitted_at, record_id);
   CREATE INDEX closeout_ledger_listing_task ON closeout_ledger_submissions (task_id COLLATE "C");
   CREATE INDEX closeout_ledger_listing_correlation ON closeout_ledger_submissions (correlation_id);
   CREATE INDEX closeout_ledger_listing_key ON closeout_ledger_submissions (idempotency_key);`,
];
