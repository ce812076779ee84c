// Preloaded into a real `closeout` process (node --import) by the e2e tests: registers the OpenTelemetry SDK as an
// application would, and writes every ended span as one JSON line to $CLOSEOUT_TEST_SPANS_FILE, synchronously, so the
// spans of a process that is SIGKILLed later are on disk already.
import { appendFileSync } from 'node:fs';
import process from 'node:process';

import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

const file = process.env.CLOSEOUT_TEST_SPANS_FILE;
if (!file) throw new Error('otelSpansToFile.mjs needs CLOSEOUT_TEST_SPANS_FILE');

const exporter = {
  export(spans, done) {
    for (const span of spans) {
      const line = {
        pid: process.pid,
        name: span.name,
        kind: span.kind,
        traceId: span.spanContext().traceId,
        spanId: span.spanContext().spanId,
        parentSpanId: span.parentSpanContext?.spanId,
        attributes: span.attributes,
        events: span.events.map((e) => ({ name: e.name, attributes: e.attributes })),
      };
      appendFileSync(file, `${JSON.stringify(line)}\n`);
    }
    done({ code: 0 });
  },
  shutdown: async () => {},
};

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
