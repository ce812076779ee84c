/**
 * The task runtime's resource limits (docs/operations.md, "Limits"): how much one task or one principal may make the server hold,
 * so a hostile or broken peer (or handler) cannot grow the store or the heap without bound. Every refusal names the
 * limit it hit and what to do instead.
 */

export interface TaskLimits {
  /** Largest serialized (UTF-8 JSON) size of a task's arguments; `tools/call` beyond it answers -32602. */
  maxArgumentsBytes: number;
  /** Largest serialized size of a handler's result (or thrown error); beyond it the task fails with -32603. */
  maxResultBytes: number;
  /** Deepest nesting of arrays and objects in arguments and results; beyond it they are refused like oversize ones. */
  maxJsonDepth: number;
  /** Most input requests one task may have outstanding at once; `ctx.input` beyond it throws inside the handler. */
  maxInputRequestsPerTask: number;
  /** Most non-terminal tasks one principal may have; `tools/call` beyond it answers -32603 naming the limit. */
  maxOpenTasksPerPrincipal: number;
  /**
   * Most tasks one principal may keep stored: open ones and finished ones not yet purged (kept for `ttlMs` plus the
   * retention). With the size limits it bounds the store's disk: at most this many times (`maxArgumentsBytes` +
   * `maxResultBytes`) per principal. `tools/call` beyond it answers -32603 naming the limit.
   */
  maxStoredTasksPerPrincipal: number;
  /**
   * Largest serialized size of one durable step's result (`ctx.step`) or of a task's checkpoint (`ctx.checkpoint`);
   * beyond it the step throws inside the handler and nothing is stored.
   */
  maxStepResultBytes: number;
  /** Most durable steps one task may store over its life; a step beyond it throws before its function runs. */
  maxStepsPerTask: number;
  /** Most bytes one task may store in step results and checkpoint together; a write beyond it throws. */
  maxStepBytesPerTask: number;
  /**
   * Most `subscriptions/listen` streams with task notifications one principal may have open on this instance; a
   * listen beyond it answers -32603 naming the limit.
   */
  maxListenStreamsPerPrincipal: number;
  /**
   * Most task ids one principal may follow by push on this instance, over all its streams (a task stops counting
   * once it is terminal); a listen asking for more answers -32603 naming the limit, or -32602 when its own list is
   * longer than the limit (a request no caller could ever have served).
   */
  maxSubscribedTasksPerPrincipal: number;
}

export const DEFAULT_LIMITS: Readonly<TaskLimits> = {
  maxArgumentsBytes: 1024 * 1024,
  maxResultBytes: 4 * 1024 * 1024,
  maxJsonDepth: 256,
  maxInputRequestsPerTask: 16,
  maxOpenTasksPerPrincipal: 1000,
  // two hours of a task every 72 ms at the default ttl and retention (an hour each)
  maxStoredTasksPerPrincipal: 100_000,
  maxStepResultBytes: 256 * 1024,
  // a batch of a thousand items with a step each, ten times over
  maxStepsPerTask: 10_000,
  maxStepBytesPerTask: 16 * 1024 * 1024,
  // one stream per endpoint is what a client needs; a few more leave room for several processes of one principal
  maxListenStreamsPerPrincipal: 16,
  // ten times maxOpenTasksPerPrincipal: room for tasks of several instances' principals without unbounded state
  maxSubscribedTasksPerPrincipal: 10_000,
};

/** The limits in `options` over the defaults; each must be a positive integer (or Infinity to switch it off). */
export function resolveLimits(options: Partial<TaskLimits>): TaskLimits {
  const limits = { ...DEFAULT_LIMITS };
  for (const name of Object.keys(DEFAULT_LIMITS) as (keyof TaskLimits)[]) {
    const value = options[name];
    if (value === undefined) continue;
    if (!(value === Infinity || (Number.isSafeInteger(value) && value > 0))) {
      throw new RangeError(`${name} must be a positive integer (or Infinity), got ${String(value)}`);
    }
    limits[name] = value;
  }
  return limits;
}

export type JsonMeasure =
  | { ok: true; bytes: number }
  | { ok: false; problem: 'too-large'; bytes: number | undefined }
  | { ok: false; problem: 'too-deep' }
  | { ok: false; problem: 'not-json'; reason: string };

/**
 * The serialized size of `value`, or why it cannot be stored within `maxBytes` and `maxDepth`. The depth is checked
 * first, without recursion, so a deeply nested value is refused precisely instead of overflowing the stack in
 * JSON.stringify; the walk gives up after `maxBytes` nodes (each costs at least a byte), so it is bounded too.
 */
export function measureJson(value: unknown, maxBytes: number, maxDepth: number): JsonMeasure {
  const pending: [unknown, number][] = [[value, 0]];
  let nodes = 0;
  while (pending.length > 0) {
    const [node, depth] = pending.pop()!;
    if (++nodes > maxBytes) return { ok: false, problem: 'too-large', bytes: undefined };
    if (typeof node !== 'object' || node === null) continue;
    if (depth >= maxDepth) return { ok: false, problem: 'too-deep' };
    const children = Array.isArray(node) ? node : Object.values(node);
    for (const child of children) pending.push([child, depth + 1]);
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    return { ok: false, problem: 'not-json', reason: error instanceof Error ? error.message : String(error) };
  }
  if (json === undefined) return { ok: false, problem: 'not-json', reason: 'it has no JSON representation' };
  const bytes = Buffer.byteLength(json, 'utf8');
  return bytes > maxBytes ? { ok: false, problem: 'too-large', bytes } : { ok: true, bytes };
}

/** Why a measured value was refused, in words that name the limit: "is N bytes, over ... (maxResultBytes)". */
export function describeRefusal(
  measure: Exclude<JsonMeasure, { ok: true }>,
  limits: TaskLimits,
  sizeLimit: 'maxArgumentsBytes' | 'maxResultBytes' | 'maxStepResultBytes',
): string {
  switch (measure.problem) {
    case 'too-large':
      return measure.bytes === undefined
        ? `larger than this server's limit of ${limits[sizeLimit]} bytes (${sizeLimit})`
        : `${measure.bytes} bytes serialized, over this server's limit of ${limits[sizeLimit]} bytes (${sizeLimit})`;
    case 'too-deep':
      return `nested deeper than this server's limit of ${limits.maxJsonDepth} levels (maxJsonDepth)`;
    case 'not-json':
      return `not serializable as JSON (${measure.reason})`;
  }
}
