/**
 * The ledger on its own: its records and the SQLite ledger, without the MCP SDK the rest of the client half loads.
 * The CLI's commands that only read or write the ledger (`ls`, `show`) import this, so they start fast. Named exports
 * only; the public `closeout/client` entry point re-exports what users need of it.
 */
export type {
  Closing,
  HistoryEntry,
  InputAnswer,
  Ledger,
  LedgerFilter,
  LocalState,
  NewSubmission,
  ObservedTask,
  RecordedError,
  RecordedIntent,
  TaskRecord,
} from './ledger.js';
export { FOLLOWABLE_STATES, isFollowable, LOCAL_STATES } from './ledger.js';
export { LEDGER_SCHEMA_VERSION } from './sqlite/schema.js';
export type { SqliteLedgerOptions } from './sqliteLedger.js';
export { SqliteLedger } from './sqliteLedger.js';
