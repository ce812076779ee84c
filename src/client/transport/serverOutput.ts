/**
 * Checking what a Tasks server says before the client believes it. A bad answer is a `ServerOutputError` naming
 * what is wrong; the caller records it on the submission and carries on: never a crash, never another task's
 * problem.
 */
import { SdkError, SdkErrorCode } from '@modelcontextprotocol/client';
import type * as z from 'zod/v4';

import {
  canTransition,
  DetailedTaskSchema,
  isTerminalStatus,
  TASK_RESULT_TYPE,
  TaskSchema,
} from '../../protocol/index.js';
import { storableText } from '../../protocol/storableText.js';
import type { ObservedTask } from '../ledger/ledger.js';

/**
 * The most `inputRequests` one answer may carry. Each key is a question for a person (or a model) and a ledger row:
 * a server asking thousands at once is refused, not obeyed. Closeout's own server allows 16 outstanding per task.
 */
export const MAX_INPUT_REQUESTS = 64;

/** The most bytes (as JSON) the `inputRequests` of one answer may take: a request is shown and stored, not streamed. */
export const MAX_INPUT_REQUESTS_BYTES = 1_048_576;

// C0/C1 controls (ESC among them), DEL, bidi controls and line separators: what a terminal acts on or a reader misreads
// eslint-disable-next-line no-control-regex
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/;

/**
 * A server's taskId is printed, logged, pasted back by a person and sent in the `Mcp-Name` header: one that carries
 * escape sequences or other control characters is refused as bad output, never shown to anyone (the spec leaves the
 * id opaque; no server of good faith needs them).
 */
function checkTaskId(taskId: string, what: string): void {
  if (CONTROL_CHARACTER.test(taskId)) {
    throw new ServerOutputError(
      `${what} is not a valid task: taskId must not contain control characters (escape sequences, bidi controls, line breaks)`,
    );
  }
}

export class ServerOutputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ServerOutputError';
  }
}

/**
 * The previous state a new answer is checked against. Timestamps are not part of it: `lastUpdatedAt` comes from the
 * server's clock (or from several instances' clocks), and no order is taken from two hosts' wall clocks
 * (docs/DESIGN.md, rule 2). Answers to one record's polls arrive one after another, so the latest answer is the
 * server's latest word.
 */
export interface KnownTaskState {
  taskId: string;
  status: ObservedTask['status'] | undefined;
}

/** Validate a CreateTaskResult (the `tools/call` answer with `resultType: "task"`). */
export function parseCreateTaskResult(raw: Record<string, unknown>): ObservedTask {
  if (raw['resultType'] !== TASK_RESULT_TYPE) {
    throw new ServerOutputError(`tools/call answered with resultType ${JSON.stringify(raw['resultType'])}`);
  }
  const { resultType: _resultType, ...rest } = raw;
  // CreateTaskResult is `Result & Task`: a terminal seed state need not carry its result or error (the next
  // tasks/get does); they are taken when they are there and well-formed
  if (DetailedTaskSchema.safeParse(rest).success) return toObservedTask(rest, 'CreateTaskResult');
  const { result: _result, error: _error, inputRequests: _inputRequests, ...task } = rest;
  const parsed = TaskSchema.safeParse(task);
  if (!parsed.success) {
    throw new ServerOutputError(`CreateTaskResult is not a valid task: ${describeIssues(parsed.error)}`);
  }
  checkTaskId(parsed.data.taskId, 'CreateTaskResult');
  checkCreatedAt(parsed.data.createdAt, 'CreateTaskResult');
  return {
    taskId: parsed.data.taskId,
    status: parsed.data.status,
    statusMessage: storableMessage(parsed.data.statusMessage),
    createdAt: parsed.data.createdAt,
    lastUpdatedAt: parsed.data.lastUpdatedAt,
    ttlMs: parsed.data.ttlMs,
    pollIntervalMs: parsed.data.pollIntervalMs,
  };
}

/** Validate a `tasks/get` answer for `expectedTaskId`. */
export function parseGetTaskResult(raw: unknown, expectedTaskId: string): ObservedTask {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ServerOutputError('tasks/get answered with something that is not an object');
  }
  const task = toObservedTask(raw as Record<string, unknown>, 'tasks/get result');
  if (task.taskId !== expectedTaskId) {
    throw new ServerOutputError(`tasks/get for taskId ${expectedTaskId} answered with taskId ${task.taskId}`);
  }
  return task;
}

/**
 * Whether `next` may follow `known` (SEP-2663 "Task Status": a terminal task never changes state). Returns the
 * violation, or undefined when the answer is acceptable. An identical terminal answer is acceptable, and a terminal
 * answer is always acceptable after a non-terminal one, whatever its timestamps say (docs/DESIGN.md, rule 2).
 */
export function progressionViolation(known: KnownTaskState, next: ObservedTask): string | undefined {
  if (next.taskId !== known.taskId) return `taskId changed from ${known.taskId} to ${next.taskId}`;
  if (known.status !== undefined && next.status !== known.status && !canTransition(known.status, next.status)) {
    return isTerminalStatus(next.status)
      ? `status changed after terminal: ${known.status} -> ${next.status}`
      : `status went backwards: terminal ${known.status} -> ${next.status}`;
  }
  return undefined;
}

/** The SDK's own verdicts on a malformed answer (unknown resultType, missing resultType, not an object). */
export function sdkServerOutputMessage(error: unknown): string | undefined {
  if (!(error instanceof SdkError)) return undefined;
  if (error.code === SdkErrorCode.UnsupportedResultType || error.code === SdkErrorCode.InvalidResult) {
    return error.message;
  }
  return undefined;
}

function toObservedTask(raw: Record<string, unknown>, what: string): ObservedTask {
  const { resultType: _resultType, ...task } = raw;
  const parsed = DetailedTaskSchema.safeParse(task);
  if (!parsed.success) throw new ServerOutputError(`${what} is not a valid task: ${describeIssues(parsed.error)}`);
  const data = parsed.data;
  checkTaskId(data.taskId, what);
  checkCreatedAt(data.createdAt, what);
  if (data.status === 'input_required') checkInputRequests(data.inputRequests, what);
  return {
    taskId: data.taskId,
    status: data.status,
    statusMessage: storableMessage(data.statusMessage),
    createdAt: data.createdAt,
    lastUpdatedAt: data.lastUpdatedAt,
    ttlMs: data.ttlMs,
    pollIntervalMs: data.pollIntervalMs,
    result: data.status === 'completed' ? data.result : undefined,
    error: data.status === 'failed' ? data.error : undefined,
    inputRequests: data.status === 'input_required' ? data.inputRequests : undefined,
  };
}

/** Enormous `inputRequests` are refused before any of them reaches a handler or the ledger. */
function checkInputRequests(inputRequests: Record<string, unknown>, what: string): void {
  const keys = Object.keys(inputRequests).length;
  if (keys > MAX_INPUT_REQUESTS) {
    throw new ServerOutputError(
      `${what} has ${keys} inputRequests, more than this client takes in one answer (${MAX_INPUT_REQUESTS})`,
    );
  }
  const bytes = Buffer.byteLength(JSON.stringify(inputRequests));
  if (bytes > MAX_INPUT_REQUESTS_BYTES) {
    throw new ServerOutputError(
      `${what} has inputRequests of ${bytes} bytes, more than this client takes in one answer (${MAX_INPUT_REQUESTS_BYTES})`,
    );
  }
}

/** createdAt is shown to people and kept in the ledger: it must be a time (never compared with the client's clock). */
function checkCreatedAt(createdAt: string, what: string): void {
  if (Number.isNaN(Date.parse(createdAt))) {
    throw new ServerOutputError(`${what} has createdAt ${JSON.stringify(createdAt)}, not an ISO 8601 time`);
  }
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('; ');
}

/** A server's status message is free text: kept with each NUL and lone surrogate as U+FFFD, alike on every ledger
 * (docs/DESIGN.md rule 14). */
function storableMessage(message: string | undefined): string | undefined {
  return message === undefined ? undefined : storableText(message);
}
