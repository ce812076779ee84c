/**
 * Wire shapes of the Tasks extension (SEP-2663) and the MRTR pieces it reuses (MCP 2026-07-28,
 * basic/patterns/mrtr). Objects are loose: unknown fields (and `_meta`) pass through, as the spec allows them.
 */
import * as z from 'zod/v4';

import { MAX_INPUT_KEY_LENGTH, MAX_TASK_ID_LENGTH } from './constants.js';
import { storable } from './storableText.js';

export const JsonObjectSchema = z.record(z.string(), z.unknown());
export type JsonObject = z.infer<typeof JsonObjectSchema>;

export const TaskStatusSchema = z.enum(['working', 'input_required', 'completed', 'failed', 'cancelled']);
export type TaskStatus = z.infer<typeof TaskStatusSchema>;

/** A taskId on the wire: a non-empty string of bounded length, text every store keeps as it is. */
export const TaskIdSchema = storable(
  z
    .string({ error: 'taskId must be a string' })
    .min(1, { error: 'taskId must not be empty' })
    .max(MAX_TASK_ID_LENGTH, { error: `taskId must be at most ${MAX_TASK_ID_LENGTH} characters` }),
  'taskId',
);

const nonNegativeInt = z.number().int().nonnegative();

/** SEP-2663 `Task`. */
export const TaskSchema = z.looseObject({
  taskId: TaskIdSchema,
  status: TaskStatusSchema,
  statusMessage: z.string().optional(),
  createdAt: storable(z.string(), 'createdAt'),
  lastUpdatedAt: storable(z.string(), 'lastUpdatedAt'),
  ttlMs: nonNegativeInt.nullable(),
  pollIntervalMs: nonNegativeInt.optional(),
});
export type Task = z.infer<typeof TaskSchema>;

/** MRTR `InputRequest`: an elicitation, sampling or roots request the server needs the client to fulfil. */
export const ElicitInputRequestSchema = z.looseObject({
  method: z.literal('elicitation/create'),
  params: JsonObjectSchema,
});
export const SamplingInputRequestSchema = z.looseObject({
  method: z.literal('sampling/createMessage'),
  params: JsonObjectSchema,
});
export const RootsInputRequestSchema = z.looseObject({
  method: z.literal('roots/list'),
  params: JsonObjectSchema.optional(),
});
export const InputRequestSchema = z.discriminatedUnion('method', [
  ElicitInputRequestSchema,
  SamplingInputRequestSchema,
  RootsInputRequestSchema,
]);
export type InputRequest = z.infer<typeof InputRequestSchema>;

export const InputKeySchema = storable(z.string().min(1).max(MAX_INPUT_KEY_LENGTH), 'an input key');

/** MRTR `InputRequests`: keys are server-assigned, unique over the task's life (SEP-2663 "Task Update Requests"). */
export const InputRequestsSchema = z.record(InputKeySchema, InputRequestSchema);
export type InputRequests = z.infer<typeof InputRequestsSchema>;

/** MRTR `InputResponse`: an ElicitResult, CreateMessageResult or ListRootsResult. */
export const InputResponseSchema = JsonObjectSchema;
export type InputResponse = z.infer<typeof InputResponseSchema>;

export const InputResponsesSchema = z.record(InputKeySchema, InputResponseSchema);
export type InputResponses = z.infer<typeof InputResponsesSchema>;

/** A JSON-RPC error object, as carried by a failed task. */
export const JsonRpcErrorSchema = z.looseObject({
  code: z.number().int(),
  message: z.string(),
  data: z.unknown().optional(),
});
export type JsonRpcError = z.infer<typeof JsonRpcErrorSchema>;

export const WorkingTaskSchema = TaskSchema.extend({ status: z.literal('working') });
export const InputRequiredTaskSchema = TaskSchema.extend({
  status: z.literal('input_required'),
  inputRequests: InputRequestsSchema,
});
export const CompletedTaskSchema = TaskSchema.extend({ status: z.literal('completed'), result: JsonObjectSchema });
export const FailedTaskSchema = TaskSchema.extend({ status: z.literal('failed'), error: JsonRpcErrorSchema });
export const CancelledTaskSchema = TaskSchema.extend({ status: z.literal('cancelled') });

/** SEP-2663 `DetailedTask`: the status-specific variant with `inputRequests`, `result` or `error` inlined. */
export const DetailedTaskSchema = z.discriminatedUnion('status', [
  WorkingTaskSchema,
  InputRequiredTaskSchema,
  CompletedTaskSchema,
  FailedTaskSchema,
  CancelledTaskSchema,
]);
export type WorkingTask = z.infer<typeof WorkingTaskSchema>;
export type InputRequiredTask = z.infer<typeof InputRequiredTaskSchema>;
export type CompletedTask = z.infer<typeof CompletedTaskSchema>;
export type FailedTask = z.infer<typeof FailedTaskSchema>;
export type CancelledTask = z.infer<typeof CancelledTaskSchema>;
export type DetailedTask = z.infer<typeof DetailedTaskSchema>;

/** SEP-2663 `CreateTaskResult`: `Result & Task` with `resultType: "task"`. */
export const CreateTaskResultSchema = TaskSchema.extend({ resultType: z.literal('task') });
export type CreateTaskResult = z.infer<typeof CreateTaskResultSchema>;

const RequestMetaSchema = z.looseObject({}).optional();

/** `tasks/get` params. */
export const GetTaskParamsSchema = z.looseObject({ taskId: TaskIdSchema, _meta: RequestMetaSchema });
export type GetTaskParams = z.infer<typeof GetTaskParamsSchema>;

/** `tasks/get` result: `Result & DetailedTask` (resultType "complete"). */
export const GetTaskResultSchema = DetailedTaskSchema;
export type GetTaskResult = DetailedTask;

/**
 * `tasks/update` params. `inputResponses` is optional here because the SDK lifts it out of the params into the
 * request context before a server-side schema runs; the client always sends it.
 */
export const UpdateTaskParamsSchema = z.looseObject({
  taskId: TaskIdSchema,
  inputResponses: z.unknown().optional(),
  _meta: RequestMetaSchema,
});
export type UpdateTaskParams = { taskId: string; inputResponses: InputResponses };

/** `tasks/cancel` params. */
export const CancelTaskParamsSchema = z.looseObject({ taskId: TaskIdSchema, _meta: RequestMetaSchema });
export type CancelTaskParams = z.infer<typeof CancelTaskParamsSchema>;

/** `tasks/update` and `tasks/cancel` results: an empty acknowledgement. */
export const EmptyResultSchema = z.looseObject({});
