/**
 * The PostgreSQL task store's schema: its migrations (entry i takes the database from version i to i + 1, run by
 * src/shared/postgres/migrations.ts under an advisory lock) and the NOTIFY channel its signals travel on.
 */
/** The NOTIFY channel; payload `{"taskId": "...", "kind": "input" | "cancel" | "status"}` (see TaskSignal). */
export const TASK_SIGNAL_CHANNEL = 'closeout_task_signal';

/** Key of the transaction-scoped advisory lock that serialises migrations across instances ("closeout" in ASCII). */
export const MIGRATION_LOCK_KEY = '7164223648653342068';

/**
 * Versioned schema: entry i takes the database from version i to i + 1. Never edit an entry once released: its status
 * sets stay written out, and test/server/store/statusSql.test.ts fails when they no longer match the status machine.
 */
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE closeout_tasks (
     task_id          TEXT PRIMARY KEY,
     owner            TEXT NOT NULL,
     tool_name        TEXT NOT NULL,
     arguments        TEXT NOT NULL, -- JSON text
     status           TEXT NOT NULL CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message   TEXT,
     created_at       BIGINT NOT NULL, -- epoch ms, as every time in this schema
     last_updated_at  BIGINT NOT NULL,
     ttl_ms           BIGINT,
     expires_at       BIGINT, -- created_at + ttl_ms; NULL for an unlimited TTL
     poll_interval_ms BIGINT NOT NULL,
     resumable        BOOLEAN NOT NULL,
     idempotency_key  TEXT,
     result           TEXT, -- JSON text
     error            TEXT, -- JSON text
     cancel_requested BOOLEAN NOT NULL DEFAULT false,
     lease_owner      TEXT,
     lease_expires_at BIGINT,
     fence            INTEGER NOT NULL DEFAULT 1,
     attempt          INTEGER NOT NULL DEFAULT 1
   );
   -- one task per owner and idempotency key: the arbiter of concurrent idempotent creates
   CREATE UNIQUE INDEX closeout_tasks_idempotency ON closeout_tasks (owner, idempotency_key)
     WHERE idempotency_key IS NOT NULL;
   -- the sweeps only ever look at open tasks (leases, expiry) or closed ones (purge)
   CREATE INDEX closeout_tasks_open_lease ON closeout_tasks (lease_expires_at)
     WHERE status IN ('working','input_required');
   CREATE INDEX closeout_tasks_open_lease_owner ON closeout_tasks (lease_owner)
     WHERE status IN ('working','input_required');
   -- the per-principal open-task limit counts a principal's open tasks on every tools/call
   CREATE INDEX closeout_tasks_open_owner ON closeout_tasks (owner)
     WHERE status IN ('working','input_required');
   CREATE INDEX closeout_tasks_open_expiry ON closeout_tasks (expires_at)
     WHERE status IN ('working','input_required');
   CREATE INDEX closeout_tasks_closed_expiry ON closeout_tasks (expires_at)
     WHERE status IN ('completed','failed','cancelled');
   CREATE TABLE closeout_task_inputs (
     task_id      TEXT NOT NULL REFERENCES closeout_tasks (task_id) ON DELETE CASCADE,
     key          TEXT NOT NULL,
     seq          INTEGER NOT NULL,
     request      TEXT NOT NULL, -- JSON text
     response     TEXT, -- JSON text; NULL while outstanding
     requested_at BIGINT NOT NULL,
     answered_at  BIGINT,
     PRIMARY KEY (task_id, key) -- keys are unique over the task's life
   );
   CREATE TABLE closeout_purged_tasks (task_id TEXT PRIMARY KEY, purged_at BIGINT NOT NULL);`,
  // a tombstone remembers its owner: only the owner may learn that the id existed
  `ALTER TABLE closeout_purged_tasks ADD COLUMN owner TEXT;`,
  // the input kinds the creating request declared (JSON text; NULL for tasks created before): docs/DESIGN.md rule 6
  `ALTER TABLE closeout_tasks ADD COLUMN input_capabilities TEXT;`,
  // every column a sweep filters on is indexed (docs/DESIGN.md, "Rules learned in the field", 8): tombstones by age,
  // finished tasks without a TTL by the time they finished
  `CREATE INDEX closeout_purged_tasks_purged_at ON closeout_purged_tasks (purged_at);
   CREATE INDEX closeout_tasks_closed_unlimited ON closeout_tasks (last_updated_at)
     WHERE status IN ('completed','failed','cancelled') AND expires_at IS NULL;`,
  // the per-principal stored-task limit counts a principal's tasks, open and finished, on every tools/call
  `CREATE INDEX closeout_tasks_owner ON closeout_tasks (owner);`,
  // durable steps (ctx.step) and the checkpoint (ctx.checkpoint) of a task, written by its lease holder only and
  // deleted with the task; the checkpoint is the one row of kind 'checkpoint', named ''
  `CREATE TABLE closeout_task_steps (
     task_id      TEXT NOT NULL REFERENCES closeout_tasks (task_id) ON DELETE CASCADE,
     kind         TEXT NOT NULL CHECK (kind IN ('step','checkpoint')),
     name         TEXT NOT NULL,
     seq          INTEGER NOT NULL,
     result       TEXT, -- JSON text; NULL for a step whose function returned nothing
     bytes        BIGINT NOT NULL, -- UTF-8 length of result, for the per-task limit
     committed_at BIGINT NOT NULL,
     PRIMARY KEY (task_id, kind, name) -- step names are unique over the task's life
   );`,
  // the W3C trace context of the creating tools/call (JSON text; NULL without one), so every run joins its trace
  `ALTER TABLE closeout_tasks ADD COLUMN trace_context TEXT;`,
  // each principal's open and stored tasks, counted in shard rows with a quota each (docs/DESIGN.md,
  // "Per-principal limits on PostgreSQL"): a create checks one shard's quota, locked for its own statement only,
  // instead of a per-principal lock and two counts that grow with the principal's tasks. Each task remembers its
  // shard. Triggers keep the counts equal to the tasks, whatever statement (or release) writes them; they exist before
  // the first count, so no write slips between. Quotas start at 0: a principal's first create deals them out
  `CREATE TABLE closeout_principal_tasks (
     owner              TEXT NOT NULL, -- the caller's principal, as closeout_tasks.owner
     shard              SMALLINT NOT NULL,
     open_tasks         BIGINT NOT NULL DEFAULT 0, -- its tasks of this shard whose status IN ('working','input_required')
     stored_tasks       BIGINT NOT NULL DEFAULT 0, -- all its rows of this shard in closeout_tasks
     -- the part of each limit this shard may admit on its own, and the limits it was dealt from (NULL: none yet)
     open_quota         BIGINT NOT NULL DEFAULT 0,
     stored_quota       BIGINT NOT NULL DEFAULT 0,
     quota_open_limit   BIGINT,
     quota_stored_limit BIGINT,
     PRIMARY KEY (owner, shard)
   );
   ALTER TABLE closeout_tasks ADD COLUMN count_shard SMALLINT NOT NULL DEFAULT 0;
   CREATE FUNCTION closeout_count_inserted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO closeout_principal_tasks AS c (owner, shard, open_tasks, stored_tasks)
     SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')), COUNT(*)
     FROM inserted GROUP BY owner, count_shard ORDER BY owner, count_shard
     ON CONFLICT (owner, shard) DO UPDATE
       SET open_tasks = c.open_tasks + EXCLUDED.open_tasks, stored_tasks = c.stored_tasks + EXCLUDED.stored_tasks;
     RETURN NULL;
   END $$;
   CREATE FUNCTION closeout_count_task_status() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     UPDATE closeout_principal_tasks
     SET open_tasks = open_tasks + CASE WHEN NEW.status IN ('working','input_required') THEN 1 ELSE -1 END
     WHERE owner = NEW.owner AND shard = NEW.count_shard;
     RETURN NULL;
   END $$;
   -- one statement may delete many principals' tasks (purge): their rows are locked in one order, so two such
   -- statements never wait on each other in a circle
   CREATE FUNCTION closeout_count_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM 1 FROM closeout_principal_tasks c
     WHERE (c.owner, c.shard) IN (SELECT owner, count_shard FROM deleted) ORDER BY c.owner, c.shard FOR UPDATE;
     UPDATE closeout_principal_tasks c
     SET open_tasks = c.open_tasks - d.open_tasks, stored_tasks = c.stored_tasks - d.stored_tasks
     FROM (SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')) AS open_tasks,
             COUNT(*) AS stored_tasks
           FROM deleted GROUP BY owner, count_shard) d
     WHERE c.owner = d.owner AND c.shard = d.count_shard;
     RETURN NULL;
   END $$;
   CREATE TRIGGER closeout_tasks_count_inserted AFTER INSERT ON closeout_tasks REFERENCING NEW TABLE AS inserted
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_count_inserted_tasks();
   -- the owner and shard of a task never change; only a move into or out of the open statuses changes a count
   CREATE TRIGGER closeout_tasks_count_status AFTER UPDATE OF status ON closeout_tasks
     FOR EACH ROW WHEN ((OLD.status IN ('working','input_required')) IS DISTINCT FROM
                        (NEW.status IN ('working','input_required')))
     EXECUTE FUNCTION closeout_count_task_status();
   CREATE TRIGGER closeout_tasks_count_deleted AFTER DELETE ON closeout_tasks REFERENCING OLD TABLE AS deleted
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_count_deleted_tasks();
   INSERT INTO closeout_principal_tasks (owner, shard, open_tasks, stored_tasks)
   SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')), COUNT(*)
   FROM closeout_tasks GROUP BY owner, count_shard;`,
  // since version 8 no statement reads tasks by owner alone (the shard rows count them), and every index costs each
  // create and finish a write (docs/DESIGN.md, "Per-principal limits on PostgreSQL"): the two owner indexes
  // go. An instance of a release before version 8 still counts by owner: upgrade every instance past it first
  `DROP INDEX IF EXISTS closeout_tasks_open_owner;
   DROP INDEX IF EXISTS closeout_tasks_owner;`,
  // a batch of finishes counts the tasks it closed in its own statement, one write of each shard row it touches
  // instead of one per task (bench/RESULTS.md, section 19): it marks the rows it closes, and the status
  // trigger leaves those. Every other statement, and an instance of an older release, leaves the mark false and is
  // counted by the trigger as before; a closed task never opens again, so the mark is never read after
  `ALTER TABLE closeout_tasks ADD COLUMN closed_counted BOOLEAN NOT NULL DEFAULT false;
   DROP TRIGGER closeout_tasks_count_status ON closeout_tasks;
   CREATE TRIGGER closeout_tasks_count_status AFTER UPDATE OF status ON closeout_tasks
     FOR EACH ROW WHEN ((OLD.status IN ('working','input_required')) IS DISTINCT FROM
                        (NEW.status IN ('working','input_required')) AND NOT NEW.closed_counted)
     EXECUTE FUNCTION closeout_count_task_status();`,
  // the counts follow what an operator does to the tables too (docs/DESIGN.md, "Per-principal limits on
  // PostgreSQL"): TRUNCATE fires no row or DELETE trigger, so a TRUNCATE of the tasks (CASCADE or not) drops their
  // counts with them, and a TRUNCATE of the counts recounts the tasks (the recount, should counts ever be doubted).
  // Rows dropped or recounted have no quotas dealt: the principal's next create deals them, as after version 8
  `CREATE FUNCTION closeout_uncount_truncated_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     DELETE FROM closeout_principal_tasks;
     RETURN NULL;
   END $$;
   CREATE TRIGGER closeout_tasks_count_truncated AFTER TRUNCATE ON closeout_tasks
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_uncount_truncated_tasks();
   CREATE FUNCTION closeout_recount_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO closeout_principal_tasks (owner, shard, open_tasks, stored_tasks)
     SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')), COUNT(*)
     FROM closeout_tasks GROUP BY owner, count_shard;
     RETURN NULL;
   END $$;
   CREATE TRIGGER closeout_principal_tasks_recount AFTER TRUNCATE ON closeout_principal_tasks
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_recount_tasks();`,
  // the operators' listing (listing/query.ts), newest first within a status, a principal or a tool, and by task id
  // prefix in byte order ("C"), whatever the database's collation. Each index costs every create a write: these are
  // the fewest that keep a page's cost independent of how many tasks are stored
  `CREATE INDEX closeout_tasks_listing_status ON closeout_tasks (status, created_at, task_id);
   CREATE INDEX closeout_tasks_listing_tool ON closeout_tasks (tool_name, created_at, task_id);
   CREATE INDEX closeout_tasks_listing_owner ON closeout_tasks (owner, created_at, task_id);
   CREATE INDEX closeout_tasks_listing_task_id ON closeout_tasks (task_id COLLATE "C");`,
  // the operators' listing finds a task by its idempotency key whoever's it is: the unique index leads with the key,
  // as unique as before and no index more for a create to write. Dropped and made in one transaction, so no create
  // ever runs without it (an older instance's creates wait for the migration)
  `DROP INDEX closeout_tasks_idempotency;
   CREATE UNIQUE INDEX closeout_tasks_idempotency ON closeout_tasks (idempotency_key, owner)
     WHERE idempotency_key IS NOT NULL;`,
];
