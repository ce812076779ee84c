/**
 * closeout/protocol: the wire of the `io.modelcontextprotocol/tasks` extension (sep-2663), shared by both halves:
 * constants, zod schemas with their types, and the status machine. Named exports only, no wildcards;
 * `test/publicSurface.test.ts` pins the list.
 */
export { canonicalJson } from './canonicalJson.js';
export {
  CLIENT_CAPABILITIES_META_KEY,
  ErrorCode,
  IDEMPOTENCY_KEY_META_KEY,
  MAX_INPUT_KEY_LENGTH,
  MAX_TASK_ID_LENGTH,
  PROTOCOL_VERSION_META_KEY,
  requiredTasksCapabilityData,
  TASK_METHODS,
  TASK_RESULT_TYPE,
  TASKS_EXTENSION_ID,
} from './constants.js';
export type {
  CancelledTask,
  CancelTaskParams,
  CompletedTask,
  CreateTaskResult,
  DetailedTask,
  FailedTask,
  GetTaskParams,
  GetTaskResult,
  InputRequest,
  InputRequests,
  InputRequiredTask,
  InputResponse,
  InputResponses,
  JsonObject,
  JsonRpcError,
  Task,
  TaskStatus,
  UpdateTaskParams,
  WorkingTask,
} from './schemas.js';
export {
  CancelledTaskSchema,
  CancelTaskParamsSchema,
  CompletedTaskSchema,
  CreateTaskResultSchema,
  DetailedTaskSchema,
  ElicitInputRequestSchema,
  EmptyResultSchema,
  FailedTaskSchema,
  GetTaskParamsSchema,
  GetTaskResultSchema,
  InputKeySchema,
  InputRequestSchema,
  InputRequestsSchema,
  InputRequiredTaskSchema,
  InputResponseSchema,
  InputResponsesSchema,
  JsonObjectSchema,
  JsonRpcErrorSchema,
  RootsInputRequestSchema,
  SamplingInputRequestSchema,
  TaskIdSchema,
  TaskSchema,
  TaskStatusSchema,
  UpdateTaskParamsSchema,
  WorkingTaskSchema,
} from './schemas.js';
export type { TerminalStatus } from './status.js';
export { canTransition, isTerminalStatus, TASK_STATUSES, TERMINAL_STATUSES } from './status.js';
