/** closeout/client: the client half of durable MCP Tasks (DESIGN.md, "The task's life on the client"). */
export { argumentsDigest, canonicalJson } from './argumentsDigest.js';
export type { ConnectHttpOptions, ConnectTaskClientOptions } from './connect.js';
export { connectHttpTaskClient, connectStdioTaskClient, DEFAULT_CLIENT_INFO } from './connect.js';
export type { TaskClientErrorCode } from './errors.js';
export { TaskClientError } from './errors.js';
export type { HttpFetch } from './httpFetch.js';
export { createHttpFetch } from './httpFetch.js';
export type { InputRouterOptions, TaskInputContext, TaskInputHandlers } from './inputRouter.js';
export { capabilitiesForHandlers, InputRouter } from './inputRouter.js';
export type {
  Closing,
  HistoryEntry,
  InputAnswer,
  IntentOutcome,
  Ledger,
  LedgerFilter,
  LocalState,
  NewSubmission,
  ObservedTask,
  RecordedError,
  TaskRecord,
} from './ledger/ledger.js';
export { FOLLOWABLE_STATES, isFollowable, LOCAL_STATES } from './ledger/ledger.js';
export type { SqliteLedgerOptions } from './ledger/sqliteLedger.js';
export { LEDGER_SCHEMA_VERSION, SqliteLedger } from './ledger/sqliteLedger.js';
export type { PollOutcome, PollPolicy, PollSchedulerOptions, SchedulerClock } from './scheduler.js';
export { backoffDelay, DEFAULT_POLL_POLICY, nextPollDelay, PollScheduler, SYSTEM_CLOCK } from './scheduler.js';
export type { TaskResultCarrier } from './sdkGlue.js';
export { attachTaskResultCarrier, TASK_CARRIER_ERROR_CODE } from './sdkGlue.js';
export type { KnownTaskState } from './serverOutput.js';
export {
  MAX_INPUT_REQUESTS,
  MAX_INPUT_REQUESTS_BYTES,
  parseCreateTaskResult,
  parseGetTaskResult,
  progressionViolation,
  ServerOutputError,
} from './serverOutput.js';
export type {
  CallToolOptions,
  ResubmitOptions,
  ResumeReport,
  TaskClientEvent,
  TaskClientOptions,
} from './taskClient.js';
export { isTaskHandle, TaskClient } from './taskClient.js';
export type { TaskHandleDriver, TaskOutcome } from './taskHandle.js';
export { outcomeOf, TaskHandle } from './taskHandle.js';
export type { TransportFailure } from './transportFailure.js';
export { classifyTransportError, HttpStatusError, parseRetryAfter, retryAfterFetch } from './transportFailure.js';
