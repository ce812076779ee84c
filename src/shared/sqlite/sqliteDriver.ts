/**
 * Every better-sqlite3 connection of this package is opened here, so that none of the driver's objects is ever freed
 * by the garbage collector.
 *
 * better-sqlite3 12's `Database` and `Statement` are `node::ObjectWrap`s. Built against the headers of Node 24 and
 * later (`node_object_wrap.h`), each wrap registers an environment cleanup hook when it is made and removes it in its
 * destructor through `node::RemoveEnvironmentCleanupHook`, which finds the Environment from the isolate's current
 * context and aborts the process (`Assertion failed: (env) != nullptr`) when no context is entered. V8 deletes a
 * collected wrap in a weak callback inside the collection itself, and a collection started by an allocation in
 * compiled code has no context entered: a Statement left to the collector takes the process down at a moment no code
 * chooses, before or after the database is closed (closing finalizes the SQLite statement, not the wrap). So each
 * wrap made here stays reachable from this module until its thread's environment ends, when Node's cleanup hooks
 * delete it with the context entered. The cost is memory: a closed connection's few dozen small wraps stay until the
 * thread ends. (Node 20 and 22 have no such hook: the wraps would be freed safely there, but one rule for every line
 * is simpler to keep true.)
 *
 * Kept for the thread's life, wraps must not grow with use: `prepare` answers a text this connection already prepared
 * with the statement it made then, so a connection holds one statement per distinct text. Statements whose text is
 * built per call (the listings) bind every value, the limit included, so their texts are few. A statement is shared
 * by every `prepare` of its text: its mode (`pluck`, `raw`, `expand`) may be set only where no other code prepares
 * that text (today the ledger's `claim` and `trackedAmong`, each prepared once).
 *
 * What makes wraps: `prepare` (kept below), `pragma` (answered here from statements prepared once per text) and
 * `transaction` (the driver prepares its BEGIN/COMMIT statements once per connection and holds them as long as the
 * connection). `iterate()` and `backup()` make wraps of their own that nothing here keeps: this package uses neither.
 */
import Database from 'better-sqlite3';

/** The driver's objects made on this thread (a worker has its own module instance), kept until the thread ends. */
const KEPT: object[] = [];

/** How many driver objects this thread keeps (see above): for the tests that pin that use does not grow it. */
export function keptDriverObjects(): number {
  return KEPT.length;
}

/**
 * A connection (`new Database(path, options)`) whose statements, its own and those `pragma` prepares, are kept until
 * the thread ends, one per distinct text.
 */
export function openDatabase(path: string, options?: Database.Options): Database.Database {
  const db = new Database(path, options);
  KEPT.push(db);
  const prepare = Database.prototype.prepare;
  const statements = new Map<string, Database.Statement>();
  db.prepare = function prepareKept(this: Database.Database, source: string) {
    let statement = statements.get(source);
    if (!statement) {
      statement = prepare.call(this, source) as Database.Statement;
      KEPT.push(statement);
      statements.set(source, statement);
    }
    return statement;
  } as Database.Database['prepare'];
  // the driver's own pragma() prepares a statement on every call and drops it; this one prepares each text once
  db.pragma = (source: string, options?: Database.PragmaOptions): unknown => {
    const statement = db.prepare(`PRAGMA ${source}`);
    if (!statement.reader) {
      // a pragma that sets without answering (`foreign_keys = ON`): the driver's pragma() answers [] for it
      statement.run();
      return options?.simple ? undefined : [];
    }
    return options?.simple ? statement.pluck(true).get() : statement.pluck(false).all();
  };
  return db;
}
