/**
 * The SQLite durability setting, in a module of its own: public option types name it, and must not pull in the
 * SQLite driver's typings for a consumer (docs/operations.md, "Install").
 */

/**
 * When a commit is acknowledged (SQLite's `synchronous` in WAL mode). `full` (the default): every commit is fsynced
 * before it returns, so what was acknowledged survives a power cut or an OS crash (docs/DESIGN.md, rule 4). `normal`:
 * the WAL is fsynced only at checkpoints; a commit survives the process being killed, but the last ones before a power
 * cut or an OS crash may be lost. An explicit choice, for deployments that trade that for throughput.
 */
export type SqliteSynchronous = 'full' | 'normal';
