/**
 * What the console's JSON API answers (docs/cli.md, "The console"): one shape for a client ledger's records and a server
 * store's tasks, so the page shows both alike. The sources (ledgerSource.ts, storeSource.ts) build it; the page
 * (web/) renders it, and imports these types only: this file stands on nothing, so the page's build reads it as it is.
 */

/**
 * A status as the console shows it: a task's (SEP-2663 "Task Status"), or what a client knows of a call (a ledger
 * record's status word, src/client/ledger/recordListing.ts).
 */
export type ConsoleStatus =
  'submitting' | 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled' | 'expired' | 'unknown-outcome';

export const CONSOLE_STATUSES: readonly ConsoleStatus[] = [
  'submitting',
  'working',
  'input_required',
  'completed',
  'failed',
  'cancelled',
  'expired',
  'unknown-outcome',
];

export type SourceKind = 'ledger' | 'store';

/** A list's filters, as the page sends them in the query string. */
export interface ConsoleQuery {
  status: ConsoleStatus[] | undefined;
  tool: string | undefined;
  search: string | undefined;
  cursor: string | undefined;
  limit: number | undefined;
}

/** One line of the list. */
export interface ConsoleRow {
  /** What the detail is asked by: the record id (ledger) or the task id (store). */
  id: string;
  taskId: string | undefined;
  toolName: string;
  status: ConsoleStatus;
  statusMessage: string | undefined;
  /** When it was submitted (ledger) or created (store), on the source's clock (`now` of the list). */
  at: number;
  correlationId?: string | undefined;
  principal?: string | undefined;
  cancelRequested: boolean;
}

export interface ConsoleList {
  source: SourceKind;
  rows: ConsoleRow[];
  /** Per status for the tool and search given, whatever the status filter. */
  counts: Partial<Record<ConsoleStatus, number>>;
  nextCursor: string | undefined;
  /** The source's clock, which `at` is on. */
  now: number;
}

export interface ConsoleInput {
  key: string;
  method: string;
  /** What the server asks a person (an elicitation's message). */
  message: string | undefined;
  /** An elicitation form's JSON Schema (MCP `requestedSchema`). */
  requestedSchema: unknown;
  /** The request as sent, for methods the console has no form for. */
  request: unknown;
  askedAt: number | undefined;
  answeredAt: number | undefined;
  response: unknown;
  sentAt: number | undefined;
  /** Still waiting for an answer: the form is offered. */
  open: boolean;
}

export interface ConsoleTimelineEntry {
  at: number;
  /** A status or local state reached, or an event (`created`, `step`...). */
  what: string;
  detail: string | undefined;
}

export interface ConsoleActions {
  answer: boolean;
  cancel: boolean;
  resubmit: boolean;
  /** Follow the record in the console process (nobody follows it now): its polls bring its inputs and its end. */
  follow: boolean;
}

export interface ConsoleDetail {
  source: SourceKind;
  id: string;
  taskId: string | undefined;
  toolName: string;
  status: ConsoleStatus;
  statusMessage: string | undefined;
  arguments: unknown;
  /** Facts shown as label and value, in order (endpoint, correlation id, lease holder...). */
  facts: Array<[string, string]>;
  timeline: ConsoleTimelineEntry[];
  inputs: ConsoleInput[];
  steps: Array<{ name: string; result: unknown; committedAt: number }> | undefined;
  checkpoint: unknown;
  result: unknown;
  error: unknown;
  traceId: string | undefined;
  actions: ConsoleActions;
  now: number;
}

/** What an action did, in words for the page. */
export interface ConsoleActionResult {
  ok: boolean;
  message: string;
  /** The record or task the page should show next (a resubmission's new record). */
  id?: string | undefined;
}

/** A refused request: the page shows `error` as it is. */
export class ConsoleRequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'ConsoleRequestError';
  }
}

/** A source of tasks for the console: a client ledger or a server store. */
export interface ConsoleSource {
  readonly kind: SourceKind;
  /** Where it is, as shown (a connection string without its password). */
  readonly shown: string;
  /** The statuses its tasks can be in. */
  readonly statuses: readonly ConsoleStatus[];
  list(query: ConsoleQuery): Promise<ConsoleList>;
  /** Undefined when there is no such record or task. */
  detail(id: string): Promise<ConsoleDetail | undefined>;
  cancel(id: string): Promise<ConsoleActionResult>;
  /** Cancels every open task the filters select (its cursor and limit unused), at most `max`. */
  cancelAll(query: ConsoleQuery, max: number): Promise<ConsoleActionResult>;
  answer?(id: string, key: string, response: unknown): Promise<ConsoleActionResult>;
  resubmit?(id: string): Promise<ConsoleActionResult>;
  follow?(id: string): Promise<ConsoleActionResult>;
  /** Lets go of whatever the source took up (leases, connections); the ledger or store itself stays open. */
  close(): Promise<void>;
}
