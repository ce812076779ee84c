/**
 * What a server author writes: a task tool's configuration and the context its handler runs with.
 */
import type { CallToolResult, InputRequiredResult, ServerContext, ToolAnnotations } from '@modelcontextprotocol/server';
import type * as z from 'zod/v4';

import type { InputRequest, InputResponse, JsonObject } from '../protocol/index.js';
import type { Elicited, ElicitForm } from './typedInput.js';

/**
 * Whether a tool answers with a task (docs/DESIGN.md point 1):
 * - `never`: always a plain result;
 * - `optional`: a task when the request declared the extension, else the tool runs inline;
 * - `required`: a task, and -32021 for a request that did not declare the extension.
 */
export type TaskSupport = 'never' | 'optional' | 'required';

/** The `pollIntervalMs` to suggest for a task of a given age, in milliseconds. */
export type PollIntervalPolicy = (ageMs: number) => number;

export interface TaskToolOptions {
  /** Default `optional`. */
  support?: TaskSupport;
  /** Time-to-live from creation; `null` for unlimited. Default one hour. */
  ttlMs?: number | null;
  /** A fixed interval or a policy by age. Default: adaptive, 500 ms while young, up to 5 s as it ages. */
  pollIntervalMs?: number | PollIntervalPolicy;
  /**
   * A resumable tool is re-run from the top when its process died mid-task; answers already given are replayed, so
   * nothing is asked twice, and its durable steps and checkpoint are handed back (`ctx.step`, `ctx.checkpoint`). Any other tool's interrupted task is failed (-32603, "interrupted by a server restart").
   */
  resumable?: boolean;
}

export interface TaskToolConfig<Schema extends z.ZodType<JsonObject> | undefined = undefined> {
  title?: string;
  description?: string;
  inputSchema?: Schema;
  annotations?: ToolAnnotations;
  task?: TaskToolOptions;
  /**
   * Runs inside `tools/call`, before any task exists: may gather input synchronously through MRTR (return the SDK's
   * `inputRequired(...)`), and returns the arguments the task runs with (spec: resolve MRTR exchanges synchronously
   * before responding with a CreateTaskResult).
   */
  prepare?: (args: ToolArgs<Schema>, request: ServerContext) => Promise<ToolArgs<Schema> | InputRequiredResult>;
}

export type ToolArgs<Schema> = Schema extends z.ZodType<infer T> ? T : JsonObject;

/** What a handler gets while it runs (docs/DESIGN.md point 3). */
export interface TaskContext {
  /** The task's id; undefined when the tool runs inline (no task was created). */
  taskId: string | undefined;
  /**
   * Aborted when the task is cancelled, expires, its lease is lost or could not be renewed in time, or the server shuts
   * down. `signal.reason` is a TaskAbortedError whose `cause` says which.
   */
  signal: AbortSignal;
  /** 1 on the first run, 2 and more when a resumable task is re-run after a restart. */
  attempt: number;
  /** The caller's principal. */
  principal: string;
  /** Sets the task's `statusMessage`. */
  status(message: string): Promise<void>;
  /**
   * Raises `input_required` with `{ [key]: request }` in `inputRequests` and resolves with the client's response.
   * Keys are unique over the task's life; a key answered before (in an earlier attempt) resolves at once.
   */
  input(key: string, request: InputRequest): Promise<InputResponse>;
  /**
   * Asks with a form made from a zod object of strings, numbers, booleans and enums (`.describe()` and `.default()`
   * reach the client), and resolves with the accepted content parsed and typed, or `decline` / `cancel`. An accepted
   * content that does not fit the schema throws. As `input`, keyed and answered once over the task's life.
   */
  elicit<Schema extends z.ZodObject>(key: string, form: ElicitForm<Schema>): Promise<Elicited<z.infer<Schema>>>;
  /** A yes/no question: true only when the person accepted and said yes (decline and cancel are false). */
  confirm(key: string, message: string): Promise<boolean>;
  /**
   * A durable step (docs/server.md, "Durable steps"): runs `fn` once for the task and commits its result (JSON, at most
   * `maxStepResultBytes`) to the store before resolving; a later attempt of the task (a resumable tool re-run after a
   * restart or a takeover) gets the stored result back without running `fn`. Resolves with the result as JSON
   * round-trips it, the same in every attempt. Names are unique over the task's life: one attempt using a name twice
   * is an error naming it. A step whose `fn` threw is not stored (this attempt may try the name again, a later one
   * runs it again), nor is one killed between `fn` and the commit, so `fn` must be idempotent or be the only side
   * effect between two commits.
   * Without a task (an inline run), `fn` just runs.
   */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
  /**
   * Small durable state between attempts without a step per item (for a loop over a batch: the last index done),
   * committed like a step's result. Without a task it lives in memory for the run.
   */
  checkpoint: TaskCheckpoint;
}

/** A task's checkpoint: one JSON value (at most `maxStepResultBytes`), replaced by each `set`. */
export interface TaskCheckpoint {
  /** The value last committed by `set`, in this attempt or an earlier one; undefined when none was. */
  get<T = unknown>(): Promise<T | undefined>;
  /** Commits `value` as the task's checkpoint; resolves once it is stored. */
  set(value: unknown): Promise<void>;
}

export type TaskHandler<Args> = (args: Args, ctx: TaskContext) => CallToolResult | Promise<CallToolResult>;

/**
 * Why a handler's signal was aborted: `cancelled` (the client asked), `expired` (past its TTL), `lease-lost` (another
 * instance holds the task now), `lease-unrenewed` (this instance could not renew the lease in time, so another may take
 * the task: docs/DESIGN.md, "Rules learned in the field", 13), `shutdown` (the server is closing).
 */
export type AbortCause = 'cancelled' | 'expired' | 'lease-lost' | 'lease-unrenewed' | 'shutdown';

export class TaskAbortedError extends Error {
  override readonly cause: AbortCause;
  constructor(cause: AbortCause) {
    super(`task ${cause}`);
    this.name = 'TaskAbortedError';
    this.cause = cause;
  }
}

/** The input kinds of MRTR a client can declare: elicitation (by mode), sampling and roots. */
export type InputKind = 'elicitation' | 'sampling' | 'roots';

/**
 * `ctx.input()` asked for input of a kind the request that created the task did not declare in its client
 * capabilities (core MRTR: servers MUST NOT send input requests the client has not declared support for; elicitation:
 * MUST NOT send modes the client does not support). Nothing was sent and the task did not change. Catch it to fall
 * back (a default, a safer path, an `isError` result); left uncaught, the task ends `failed` with this error, code
 * -32021 and the missing capability in `data.requiredCapabilities`.
 */
export class InputNotDeclaredError extends Error {
  readonly code = -32021;
  readonly data: { requiredCapabilities: Record<string, unknown> };
  constructor(
    readonly key: string,
    readonly kind: InputKind,
    /** The elicitation mode asked for; undefined for sampling and roots. */
    readonly mode: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'InputNotDeclaredError';
    this.data = {
      requiredCapabilities: mode === undefined ? { [kind]: {} } : { [kind]: { [mode]: {} } },
    };
  }
}
