/**
 * W3C Trace Context in `_meta` (spec 2026-07-28, basic/index, "OpenTelemetry trace context": the keys `traceparent`,
 * `tracestate` and `baggage` are reserved and MUST follow the W3C Trace Context and W3C Baggage formats). Plain strings only, so both halves
 * share it and it needs no telemetry library; the halves turn it into OpenTelemetry contexts in their telemetry.ts.
 */

export const TRACEPARENT_META_KEY = 'traceparent';
export const TRACESTATE_META_KEY = 'tracestate';
export const BAGGAGE_META_KEY = 'baggage';
/** W3C Baggage limits the whole header to 8192 bytes: a longer value is not baggage and is dropped. */
const MAX_BAGGAGE_LENGTH = 8192;

/** A trace context as it travels in `_meta` and as a task keeps it in its store. */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string | undefined;
  /** W3C Baggage as sent; kept and forwarded as it is, read through the application's propagator. */
  baggage?: string | undefined;
}

export interface ParsedTraceparent {
  traceId: string;
  spanId: string;
  traceFlags: number;
}

// version 00 is the one W3C Trace Context defines; a higher version is read by its first four fields (its rule for
// forward compatibility), version ff is invalid
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The fields of a valid `traceparent`, or undefined (an all-zero trace or span id is invalid). */
export function parseTraceparent(value: unknown): ParsedTraceparent | undefined {
  if (typeof value !== 'string' || value.length > 512) return undefined;
  const match = TRACEPARENT.exec(value.trim());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags, rest] = match;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return undefined;
  return { traceId: traceId!, spanId: spanId!, traceFlags: parseInt(flags!, 16) };
}

export function formatTraceparent(traceId: string, spanId: string, traceFlags: number): string {
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The trace context in a request's `_meta`, when its `traceparent` is valid. */
export function traceCarrierOf(meta: unknown): TraceCarrier | undefined {
  if (typeof meta !== 'object' || meta === null) return undefined;
  const traceparent = (meta as Record<string, unknown>)[TRACEPARENT_META_KEY];
  if (!parseTraceparent(traceparent)) return undefined;
  const tracestate = (meta as Record<string, unknown>)[TRACESTATE_META_KEY];
  const baggage = (meta as Record<string, unknown>)[BAGGAGE_META_KEY];
  return {
    traceparent: (traceparent as string).trim(),
    ...(typeof tracestate === 'string' && tracestate.length <= 512 && { tracestate }),
    ...(typeof baggage === 'string' && baggage.length <= MAX_BAGGAGE_LENGTH && { baggage }),
  };
}
