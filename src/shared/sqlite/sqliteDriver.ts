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
 * What makes wraps: `prepare` (kept below), `pragma` (answered here from statements prepared once per text) and
 * `transaction` (the driver prepares its BEGIN/COMMIT statements once per connection and holds them as long as the
 * connection). `iterate()` and `backup()` make wraps of their own that nothing here keeps: this package uses neither.
 */
import Database from 'better-sqlite3';

/** The driver's objects made on this thread (a worker has its own module instance), kept until the thread ends. */
const KEPT: object[] = [];

/**
 * A connection (`new Database(path, options)`) whose statements, its own and those `pragma` prepares, are kept until
 * the thread ends.
 */
export function openDatabase(path: string, options?: Database.Options): Database.Database {
  const db = new Database(path, options);
  KEPT.push(db);
  const prepare = Database.prototype.prepare;
  db.prepare = function prepareKept(this: Database.Database, source: string) {
    const statement = prepare.call(this, source);
    KEPT.push(statement);
    return statement;
  } as Database.Database['prepare'];
  const pragmas = new Map<string, Database.Statement>();
  // the driver's own pragma() prepares a statement on every call and drops it
  db.pragma = (source: string, options?: Database.PragmaOptions): unknown => {
    let statement = pragmas.get(source);
    if (!statement) {
      statement = db.prepare(`PRAGMA ${source}`);
      pragmas.set(source, statement);
    }
    if (!statement.reader) {
      // a pragma that sets without answering (`foreign_keys = ON`): the driver's pragma() answers [] for it
      statement.run();
      return options?.simple ? undefined : [];
    }
    return options?.simple ? statement.pluck(true).get() : statement.pluck(false).all();
  };
  return db;
}
