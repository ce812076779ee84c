/**
 * closeout/client: the client half of durable MCP Tasks (docs/client.md).
 *
 * This file is the package's complete public client surface: named exports only, no wildcards; the scheduler, the
 * input router, the SDK carrier and the helpers behind them (the arguments digest, the HTTP fetch, the result
 * parsers, schema versions) stay internal. `test/publicSurface.test.ts` pins the list.
 */
export type { ConnectHttpOptions, ConnectTaskClientOptions } from './connect.js';
export { connectHttpTaskClient, connectStdioTaskClient, DEFAULT_CLIENT_INFO } from './connect.js';
export type { PollPolicy, SchedulerClock } from './core/scheduler.js';
export { DEFAULT_POLL_POLICY } from './core/scheduler.js';
export type { TaskClientErrorCode } from './errors.js';
export { TaskClientError } from './errors.js';
export type { PushOptions, PushState } from './following/pushFollower.js';
export type { TaskInputContext, TaskInputHandlers } from './input/inputRouter.js';
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
} from './ledger/ledger.js';
export { LOCAL_STATES } from './ledger/ledger.js';
export type { PostgresLedgerOptions } from './ledger/postgresLedger.js';
export { PostgresLedger } from './ledger/postgresLedger.js';
export type { SqliteLedgerOptions } from './ledger/sqliteLedger.js';
export { SqliteLedger } from './ledger/sqliteLedger.js';
export type {
  CallToolOptions,
  ResubmitOptions,
  ResumeReport,
  TaskClientEvent,
  TaskClientOptions,
} from './taskClient.js';
export { isTaskHandle, TaskClient } from './taskClient.js';
export type { TaskOutcome } from './taskHandle.js';
export { TaskHandle } from './taskHandle.js';
export type { HttpFetch } from './transport/httpFetch.js';
export { MAX_INPUT_REQUESTS, MAX_INPUT_REQUESTS_BYTES, ServerOutputError } from './transport/serverOutput.js';
