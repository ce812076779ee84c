/**
 * W3C trace context and baggage between OpenTelemetry contexts and `_meta` (spec 2026-07-28, basic/index,
 * "OpenTelemetry trace context": `traceparent`, `tracestate` and `baggage` are reserved), for both halves: the client
 * sends and keeps its call's, the server keeps its tools/call's with the task and restores it for every run.
 * Baggage is written and read by the application's registered propagator (the OpenTelemetry SDK registers the W3C
 * one by default); without one it is neither sent nor restored.
 */
import { type Context, createTraceState, propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';

import { BAGGAGE_META_KEY, formatTraceparent, parseTraceparent, type TraceCarrier } from '../protocol/traceContext.js';

/** The trace context of the span current in `ctx`, with the context's baggage; undefined without a valid span. */
export function carrierOf(ctx: Context): TraceCarrier | undefined {
  const spanContext = trace.getSpanContext(ctx);
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return undefined;
  const tracestate = spanContext.traceState?.serialize();
  const baggage = baggageOf(ctx);
  return {
    traceparent: formatTraceparent(spanContext.traceId, spanContext.spanId, spanContext.traceFlags),
    ...(tracestate && { tracestate }),
    ...(baggage && { baggage }),
  };
}

/** A remote parent context from a received or stored trace context, with its baggage; undefined without one. */
export function contextOf(carrier: TraceCarrier | undefined): Context | undefined {
  const parsed = carrier && parseTraceparent(carrier.traceparent);
  if (!parsed) return undefined;
  const withBaggage =
    carrier.baggage === undefined
      ? ROOT_CONTEXT
      : propagation.extract(ROOT_CONTEXT, { [BAGGAGE_META_KEY]: carrier.baggage });
  return trace.setSpanContext(withBaggage, {
    ...parsed,
    isRemote: true,
    ...(carrier.tracestate !== undefined && { traceState: createTraceState(carrier.tracestate) }),
  });
}

/** The context's baggage as the registered propagator writes it (only its `baggage` key is taken). */
function baggageOf(ctx: Context): string | undefined {
  if (!propagation.getBaggage(ctx)) return undefined;
  let baggage: string | undefined;
  propagation.inject(
    ctx,
    {},
    {
      set: (_carrier, key, value) => {
        if (key === BAGGAGE_META_KEY && value.length > 0) baggage = value;
      },
    },
  );
  return baggage;
}
