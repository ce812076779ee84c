/** The client's local states of a record, defined once (ledger.ts re-exports them; localStateSql.ts writes them as SQL). */

/**
 * Where a submission stands from the client's point of view.
 * - `submitting`: the intent is recorded; `tools/call` may or may not have reached the server yet.
 * - `tracking`: a taskId is committed and the task is not terminal; some process follows it.
 * - `terminal`: closed out: an immediate result, a terminal task status, or a `tools/call` that failed outright.
 * - `expired`: the handle is no longer usable (-32602 from `tasks/get`, or the TTL passed by this client's own clock)
 *   (docs/REQUIREMENTS.md S13); it may be checked again, and is tracked again when the server still knows the task.
 * - `unknown-outcome`: `tools/call` was sent and no answer was recorded; never re-sent silently.
 * - `detached`: the application let go of the handle; the task is still open and any process may pick it up.
 */
export const LOCAL_STATES = ['submitting', 'tracking', 'terminal', 'expired', 'unknown-outcome', 'detached'] as const;

export type LocalState = (typeof LOCAL_STATES)[number];
