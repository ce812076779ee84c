/**
 * The package's public surface, pinned (docs/operations.md, "Install"): each entry point exports the names chosen for it, by
 * name (no `export *`), and nothing else. Adding to the public API is a decision: make it here, on purpose. The
 * internals (the scheduler, the input router, the SDK carrier, helper functions) stay out.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** The entry points whose names are pinned here, each an `index.ts` under src/. */
type Entry = 'client' | 'server' | 'protocol' | 'console' | 'testing';

const PUBLIC: Record<Entry, { values: string[]; types: string[] }> = {
  client: {
    values: [
      'DEFAULT_CLIENT_INFO',
      'DEFAULT_POLL_POLICY',
      'LOCAL_STATES',
      'MAX_INPUT_REQUESTS',
      'MAX_INPUT_REQUESTS_BYTES',
      'PostgresLedger',
      'ServerOutputError',
      'SqliteLedger',
      'TaskClient',
      'TaskClientError',
      'TaskHandle',
      'connectHttpTaskClient',
      'connectStdioTaskClient',
      'isTaskHandle',
    ],
    types: [
      'CallToolOptions',
      'Closing',
      'ConnectHttpOptions',
      'ConnectTaskClientOptions',
      'HistoryEntry',
      'HttpFetch',
      'InputAnswer',
      'Ledger',
      'LedgerFilter',
      'LocalState',
      'NewSubmission',
      'ObservedTask',
      'PollPolicy',
      'PostgresLedgerOptions',
      'PushOptions',
      'PushState',
      'RecordedError',
      'RecordedIntent',
      'ResubmitOptions',
      'ResumeReport',
      'SchedulerClock',
      'SqliteLedgerOptions',
      'TaskClientErrorCode',
      'TaskClientEvent',
      'TaskClientOptions',
      'TaskInputContext',
      'TaskInputHandlers',
      'TaskOutcome',
      'TaskRecord',
    ],
  },
  server: {
    values: [
      'DEFAULT_LIMITS',
      'INTERRUPTED_MESSAGE',
      'InputNotDeclaredError',
      'MAX_REQUEST_JSON_DEPTH',
      'OpenTaskLimitError',
      'PostgresTaskStore',
      'SqliteTaskStore',
      'StepLimitError',
      'StoredTaskLimitError',
      'TaskAbortedError',
      'TaskListQueryError',
      'TaskServer',
      'attachTasks',
      'createTaskMcpHandler',
      'createTaskNodeHandler',
      'defaultPrincipal',
      'openTaskStore',
      'serveTaskServer',
      'serveTaskServerStdio',
    ],
    types: [
      'AbortCause',
      'AttachOptions',
      'ElicitForm',
      'Elicited',
      'InputCapabilities',
      'InputKind',
      'JsonValue',
      'LeaseRef',
      'NewTask',
      'PollIntervalPolicy',
      'PostgresPool',
      'PostgresTaskStoreOptions',
      'PrincipalResolver',
      'RegisteredTaskTool',
      'ServeOptions',
      'ServingTaskServer',
      'SqliteTaskStoreOptions',
      'StdioServeOptions',
      'StdioTaskServer',
      'StepWriteLimits',
      'StoredInput',
      'StoredStep',
      'StoredTask',
      'TaskActivity',
      'TaskCheckpoint',
      'TaskContext',
      'TaskCounts',
      'TaskHandler',
      'TaskHandlerOptions',
      'TaskLimits',
      'TaskListPage',
      'TaskListQuery',
      'TaskNodeHandler',
      'TaskServerOptions',
      'TaskSignal',
      'TaskSteps',
      'TaskStore',
      'TaskSummary',
      'TaskSupport',
      'TaskToolConfig',
      'TaskToolOptions',
      'TaskVersion',
      'TerminalOutcome',
      'ToolArgs',
    ],
  },
  protocol: {
    values: [
      'CLIENT_CAPABILITIES_META_KEY',
      'CancelTaskParamsSchema',
      'CancelledTaskSchema',
      'CompletedTaskSchema',
      'CreateTaskResultSchema',
      'DetailedTaskSchema',
      'ElicitInputRequestSchema',
      'EmptyResultSchema',
      'ErrorCode',
      'FailedTaskSchema',
      'GetTaskParamsSchema',
      'GetTaskResultSchema',
      'IDEMPOTENCY_KEY_META_KEY',
      'InputKeySchema',
      'InputRequestSchema',
      'InputRequestsSchema',
      'InputRequiredTaskSchema',
      'InputResponseSchema',
      'InputResponsesSchema',
      'JsonObjectSchema',
      'JsonRpcErrorSchema',
      'MAX_INPUT_KEY_LENGTH',
      'MAX_TASK_ID_LENGTH',
      'PROTOCOL_VERSION_META_KEY',
      'RootsInputRequestSchema',
      'SamplingInputRequestSchema',
      'TASKS_EXTENSION_ID',
      'TASK_METHODS',
      'TASK_RESULT_TYPE',
      'TASK_STATUSES',
      'TERMINAL_STATUSES',
      'TaskIdSchema',
      'TaskSchema',
      'TaskStatusSchema',
      'UpdateTaskParamsSchema',
      'WorkingTaskSchema',
      'canTransition',
      'canonicalJson',
      'isTerminalStatus',
      'requiredTasksCapabilityData',
    ],
    types: [
      'CancelTaskParams',
      'CancelledTask',
      'CompletedTask',
      'CreateTaskResult',
      'DetailedTask',
      'FailedTask',
      'GetTaskParams',
      'GetTaskResult',
      'InputRequest',
      'InputRequests',
      'InputRequiredTask',
      'InputResponse',
      'InputResponses',
      'JsonObject',
      'JsonRpcError',
      'Task',
      'TaskStatus',
      'TerminalStatus',
      'UpdateTaskParams',
      'WorkingTask',
    ],
  },
  console: {
    values: ['createConsoleHandler'],
    types: ['ConsoleHandler', 'ConsoleOptions'],
  },
  // the contract suites, for a store or ledger of your own; the only entry point that loads vitest
  testing: {
    values: ['describeLedgerContract', 'describeTaskStoreContract'],
    types: ['LedgerFixture', 'TaskStoreFixture'],
  },
};

/** The names an entry point's source re-exports, split into values and type-only names; any `export *` is refused. */
function exportedNames(entry: string): { values: string[]; types: string[]; wildcards: number } {
  const file = fileURLToPath(new URL(`../src/${entry}/index.ts`, import.meta.url));
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022);
  const values: string[] = [];
  const types: string[] = [];
  let wildcards = 0;
  for (const statement of source.statements) {
    if (!ts.isExportDeclaration(statement)) continue;
    if (!statement.exportClause || !ts.isNamedExports(statement.exportClause)) {
      wildcards += 1;
      continue;
    }
    for (const element of statement.exportClause.elements) {
      (statement.isTypeOnly || element.isTypeOnly ? types : values).push(element.name.text);
    }
  }
  return { values: values.sort(), types: types.sort(), wildcards };
}

describe.each(Object.keys(PUBLIC) as Entry[])('closeout/%s', (entry) => {
  it('exports exactly the chosen names, each by name', async () => {
    const names = exportedNames(entry);
    expect(names.wildcards).toBe(0);
    expect(names.values).toEqual(PUBLIC[entry].values);
    expect(names.types).toEqual(PUBLIC[entry].types);
    // and at run time the module has those values and no others
    const module = (await import(`../src/${entry}/index.ts`)) as Record<string, unknown>;
    expect(Object.keys(module).sort()).toEqual(PUBLIC[entry].values);
  });
});
