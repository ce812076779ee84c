export type { ServeOptions, ServingTaskServer, TaskHandlerOptions } from './http.js';
export { createTaskMcpHandler, serveTaskServer } from './http.js';
export { MAX_REQUEST_JSON_DEPTH } from './jsonDepthGuard.js';
export { DEFAULT_LIMITS, type TaskLimits } from './limits.js';
export { adaptivePollInterval } from './pollInterval.js';
export type { AttachOptions, PrincipalResolver } from './sdkGlue.js';
export { attachTasks, defaultPrincipal } from './sdkGlue.js';
export { openTaskStore } from './store/openTaskStore.js';
export { PostgresTaskStore, type PostgresTaskStoreOptions } from './store/postgresTaskStore.js';
export { SqliteTaskStore, type SqliteTaskStoreOptions } from './store/sqliteTaskStore.js';
export type {
  LeaseRef,
  NewTask,
  StoredInput,
  StoredTask,
  TaskSignal,
  TaskStore,
  TerminalOutcome,
} from './store/taskStore.js';
export { OpenTaskLimitError, StoredTaskLimitError } from './store/taskStore.js';
export { newTaskId, TASK_ID_BYTES } from './taskId.js';
export type { RegisteredTaskTool, TaskServerOptions } from './taskServer.js';
export { INTERRUPTED_MESSAGE, TaskServer } from './taskServer.js';
export type {
  AbortCause,
  PollIntervalPolicy,
  TaskContext,
  TaskHandler,
  TaskSupport,
  TaskToolConfig,
  TaskToolOptions,
  ToolArgs,
} from './taskTool.js';
export { TaskAbortedError } from './taskTool.js';
