/**
 * closeout/server: the server half of durable MCP Tasks (docs/server.md).
 *
 * This file is the package's complete public server surface: named exports only, no wildcards; the SDK glue's
 * internals, the poll-interval and task-id helpers stay internal. `test/publicSurface.test.ts` pins the list.
 */
export type { ServeOptions, ServingTaskServer, TaskHandlerOptions, TaskNodeHandler } from './http.js';
export { createTaskMcpHandler, createTaskNodeHandler, serveTaskServer } from './http.js';
export { MAX_REQUEST_JSON_DEPTH } from './jsonDepthGuard.js';
export { DEFAULT_LIMITS, type TaskLimits } from './limits.js';
export type { AttachOptions, PrincipalResolver } from './sdkGlue.js';
export { attachTasks, defaultPrincipal } from './sdkGlue.js';
export type { StdioServeOptions, StdioTaskServer } from './stdio.js';
export { serveTaskServerStdio } from './stdio.js';
export type { TaskCounts, TaskListPage, TaskListQuery, TaskSummary } from './store/listing/query.js';
export { TaskListQueryError } from './store/listing/query.js';
export { openTaskStore } from './store/openTaskStore.js';
export { type PostgresPool, PostgresTaskStore, type PostgresTaskStoreOptions } from './store/postgresTaskStore.js';
export { SqliteTaskStore, type SqliteTaskStoreOptions } from './store/sqliteTaskStore.js';
export type {
  InputCapabilities,
  JsonValue,
  LeaseRef,
  NewTask,
  StepWriteLimits,
  StoredInput,
  StoredStep,
  StoredTask,
  TaskSignal,
  TaskSteps,
  TaskStore,
  TaskVersion,
  TerminalOutcome,
} from './store/taskStore.js';
export { OpenTaskLimitError, StepLimitError, StoredTaskLimitError } from './store/taskStore.js';
export { TaskServer } from './taskServer.js';
export type { RegisteredTaskTool, TaskActivity, TaskServerOptions } from './taskServerOptions.js';
export { INTERRUPTED_MESSAGE } from './taskServerOptions.js';
export type {
  AbortCause,
  InputKind,
  PollIntervalPolicy,
  TaskCheckpoint,
  TaskContext,
  TaskHandler,
  TaskSupport,
  TaskToolConfig,
  TaskToolOptions,
  ToolArgs,
} from './taskTool.js';
export { InputNotDeclaredError, TaskAbortedError } from './taskTool.js';
export type { Elicited, ElicitForm } from './typedInput.js';
