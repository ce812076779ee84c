/**
 * A `fetch` for the SDK's Streamable HTTP transport on one undici `Agent`: about half the client CPU of Node's
 * global `fetch` per request, which spends it on WHATWG streams, Request cloning and Headers copies.
 *
 * It does what the transport asks of fetch, the same way: a JSON answer is read whole into a `Response`, an SSE
 * answer (`text/event-stream`, possibly open for hours) streams, an abort rejects with the signal's reason, and a
 * network failure rejects with `TypeError('fetch failed')` whose `cause` is undici's error, as global fetch does, so
 * `classifyTransportError` sees the same shape. Anything else it hands to global fetch: a `Request` input, a URL
 * that is not http(s) or carries credentials, a body that is not a string or bytes, and a redirect to follow.
 */
import { EventEmitter } from 'node:events';
import { Readable, Transform } from 'node:stream';

import type { Dispatcher } from 'undici';
import { Agent } from 'undici';

import { AnswerTooLargeError, oversizeListener } from './answerCap.js';

/** A `fetch` on its own connection pool, and the way to close that pool. */
export interface HttpFetch {
  readonly fetch: typeof fetch;
  /**
   * One POST on the same pool without a `Response` around it (the client's poll fast path, taskGetFastPath.ts):
   * resolves once the answer's status and headers are in, its body still to read or discard. Rejects as `fetch` does
   * (the signal's reason once aborted, else `TypeError('fetch failed')` with undici's error as `cause`). `headers` in
   * undici's flat form: name, value, name, value...
   */
  post(url: URL, headers: string[], body: string, signal: RequestSignal): Promise<HttpAnswer>;
  /** Close the pool's connections once the requests in flight have ended. Idempotent. */
  close(): Promise<void>;
}

/** What `HttpFetch.post` answers: the status and headers, and the body to read whole or to discard. */
export interface HttpAnswer {
  status: number;
  headers: Dispatcher.ResponseData['headers'];
  text(): Promise<string>;
  /** The body as it arrives (a stream that may never end), in UTF-8 text chunks. */
  chunks(): AsyncIterable<string>;
  discard(): void;
}

/**
 * What aborts one `HttpFetch.post`: an EventEmitter, one of the two kinds of signal undici takes, with the `aborted` and
 * `reason` of an AbortSignal. A waiting client sends a poll every few milliseconds, each with a signal of its own (its
 * deadline, the transport's close) held while it is in flight; an AbortController's EventTarget costs several times
 * the allocation, enough of it outliving V8's young generation to grow the heap between full collections
 * (bench/RESULTS.md, section 26).
 */
export class RequestSignal extends EventEmitter {
  aborted = false;
  reason: unknown = undefined;

  /** Abort the request (once): it rejects with `reason`, as fetch rejects with its signal's reason. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.emit('abort');
  }
}

// fetch follows these when they carry a Location (Fetch standard, "redirect status")
/**
 * The most the client reads of one answer, or of one event of an SSE stream, by default: 32 MiB, eight times a
 * Closeout server's largest result (`maxResultBytes`, 4 MiB). A server that sends more (an answer or an event that
 * never ends) costs the client this much, not all its memory (docs/operations.md, "Limits").
 */
export const DEFAULT_MAX_ANSWER_BYTES = 32 * 1024 * 1024;

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
// `new Response` refuses a body with these (Fetch standard, "null body status"; 101 and 103 never reach a Response)
const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/**
 * Create a `fetch` whose requests share one keep-alive undici `Agent` serving every origin, http and https.
 * `agentOptions` tune the pool (keep-alive timeout, connections per origin, TLS); the defaults are those of the
 * Agent behind global fetch. The pool's idle sockets are unref'd by undici, so an unclosed pool never keeps the
 * process alive, but `close()` frees them at once.
 */
export function createHttpFetch(
  agentOptions: Agent.Options = {},
  maxAnswerBytes: number = DEFAULT_MAX_ANSWER_BYTES,
): HttpFetch {
  const agent = new Agent(agentOptions);
  const httpFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = typeof input === 'string' ? new URL(input) : input instanceof URL ? input : undefined;
    const body = init?.body ?? undefined;
    if (
      url === undefined ||
      (url.protocol !== 'http:' && url.protocol !== 'https:') ||
      url.username !== '' ||
      url.password !== '' ||
      (body !== undefined && typeof body !== 'string' && !(body instanceof Uint8Array))
    ) {
      return fetch(input, init);
    }
    const signal = init?.signal ?? undefined;
    signal?.throwIfAborted();
    const method = init?.method ?? 'GET';

    let answer: Dispatcher.ResponseData;
    try {
      answer = await agent.request({
        origin: url.origin,
        path: url.pathname + url.search,
        method: method as Dispatcher.HttpMethod,
        headers: requestHeaders(init?.headers),
        body: body ?? null,
        signal: signal ?? null,
      });
    } catch (error) {
      throw fetchFailure(error, signal);
    }
    const { statusCode, statusText, headers } = answer;

    // undici does not follow redirects: ask global fetch again, which follows them or refuses as `init.redirect`
    // says; with 'manual' the 3xx answer is returned as it is, as fetch does
    if (REDIRECT_STATUSES.has(statusCode) && headers.location !== undefined && init?.redirect !== 'manual') {
      await answer.body.dump().catch(() => undefined);
      return fetch(input, init);
    }

    const responseInit = { status: statusCode, statusText, headers: headerPairs(headers) };
    if (isEventStream(headers['content-type'])) {
      // the request this stream answers is told when an event passes the cap (answerCap.ts)
      const events = answer.body.pipe(eventSizeLimit(maxAnswerBytes, oversizeListener()));
      answer.body.once('error', (error) => events.destroy(error));
      return new Response(Readable.toWeb(events) as ReadableStream<Uint8Array>, responseInit);
    }
    let bytes: Uint8Array;
    try {
      bytes = await readCapped(answer.body, maxAnswerBytes);
    } catch (error) {
      throw fetchFailure(error, signal);
    }
    const noBody = NULL_BODY_STATUSES.has(statusCode) || method.toUpperCase() === 'HEAD';
    return noBody ? new Response(null, responseInit) : new BufferedResponse(bytes, responseInit);
  };
  const post: HttpFetch['post'] = async (url, headers, body, signal) => {
    let answer: Dispatcher.ResponseData;
    try {
      answer = await agent.request({
        origin: url.origin,
        path: url.pathname + url.search,
        method: 'POST',
        headers,
        body,
        signal,
      });
    } catch (error) {
      throw fetchFailure(error, signal);
    }
    return {
      status: answer.statusCode,
      headers: answer.headers,
      text: () =>
        readCapped(answer.body, maxAnswerBytes).then(
          (bytes) => new TextDecoder().decode(bytes),
          (error: unknown) => Promise.reject(fetchFailure(error, signal)),
        ),
      chunks: () => {
        const events = answer.body.pipe(eventSizeLimit(maxAnswerBytes));
        answer.body.once('error', (error) => events.destroy(error));
        return textChunks(events, signal);
      },
      // an answer that is not read may be a stream that never ends: the connection goes with it
      discard: () => {
        // destroying a body not read to its end emits 'error' (undici's RequestAbortedError): nobody waits for it
        answer.body.on('error', () => undefined);
        answer.body.destroy();
      },
    };
  };
  // a second agent.close() rejects once the first has finished, so the first is kept
  let closing: Promise<void> | undefined;
  return { fetch: httpFetch, post, close: () => (closing ??= agent.close()) };
}

/**
 * A `Response` over a body already read whole. Node's `Response` wraps every body in a WHATWG `ReadableStream` (a
 * transferable object, its controller and queue), which cost about a tenth of a poll's client CPU (bench/RESULTS.md,
 * sections 3 and 4); here `text()`, `json()`, `arrayBuffer()` and `bytes()` read the bytes directly, once, as the
 * Fetch standard's "consume body" allows, and the stream is made only when `body`, `blob()`, `formData()` or `clone()`
 * asks for it: from then on a plain `Response` over the same bytes answers, so every reader sees one body.
 */
class BufferedResponse extends Response {
  readonly #bytes: Uint8Array;
  readonly #init: ResponseInit;
  /** Set once a reader needed the stream; it then answers everything about the body. */
  #streamed: Response | undefined;
  #used = false;

  constructor(bytes: Uint8Array, init: ResponseInit) {
    super(null, init);
    this.#bytes = bytes;
    this.#init = init;
  }

  /** The body for one read: a second read fails as fetch's does (Fetch standard, "consume body"). */
  #consume(): Uint8Array {
    if (this.#used) throw new TypeError('Body is unusable: Body has already been read');
    this.#used = true;
    return this.#bytes;
  }

  #stream(): Response {
    if (this.#streamed) return this.#streamed;
    const streamed = new Response(this.#bytes, this.#init);
    // a body read already stays read
    if (this.#used) void streamed.arrayBuffer();
    this.#streamed = streamed;
    return streamed;
  }

  // Response's typings declare its members as properties, so they are replaced on the prototype rather than overridden
  static {
    const text = (response: BufferedResponse) => new TextDecoder().decode(response.#consume());
    const members: Record<string, (this: BufferedResponse) => unknown> = {
      text() {
        return this.#streamed ? this.#streamed.text() : Promise.resolve().then(() => text(this));
      },
      json() {
        return this.#streamed ? this.#streamed.json() : Promise.resolve().then(() => JSON.parse(text(this)) as unknown);
      },
      arrayBuffer() {
        if (this.#streamed) return this.#streamed.arrayBuffer();
        return Promise.resolve().then(() => new Uint8Array(this.#consume()).buffer);
      },
      bytes() {
        if (this.#streamed) return (this.#streamed as Response & { bytes(): Promise<Uint8Array> }).bytes();
        return Promise.resolve().then(() => new Uint8Array(this.#consume()));
      },
      blob() {
        return this.#stream().blob();
      },
      formData() {
        return this.#stream().formData();
      },
      clone() {
        return this.#stream().clone();
      },
    };
    for (const [name, value] of Object.entries(members)) {
      Object.defineProperty(BufferedResponse.prototype, name, { value, writable: true, configurable: true });
    }
    Object.defineProperty(BufferedResponse.prototype, 'body', {
      configurable: true,
      get(this: BufferedResponse) {
        return this.#stream().body;
      },
    });
    Object.defineProperty(BufferedResponse.prototype, 'bodyUsed', {
      configurable: true,
      get(this: BufferedResponse) {
        return this.#streamed?.bodyUsed ?? this.#used;
      },
    });
  }
}

/** The whole body, failing (and dropping the rest) once it passes `max` bytes. */
async function readCapped(body: Dispatcher.ResponseData['body'], max: number): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    total += chunk.byteLength;
    if (total > max) {
      body.destroy();
      throw new AnswerTooLargeError(max, 'answer');
    }
    chunks.push(chunk);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
}

/**
 * Passes an SSE body through, failing once one event (the bytes since the last blank line, which ends an event in
 * every line-ending the SSE format allows) passes `max` bytes: a stream may run for hours, an event may not grow
 * without end. `onOversize` is told first.
 */
function eventSizeLimit(max: number, onOversize?: (error: AnswerTooLargeError) => void): Transform {
  let sinceBoundary = 0;
  let tail = '';
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      const text = tail + chunk.toString('latin1');
      // latin1: one character per byte, so positions are byte counts
      const end = lastEventEnd(text);
      sinceBoundary = end < 0 ? sinceBoundary + chunk.byteLength : text.length - end;
      tail = text.slice(-3);
      if (sinceBoundary > max) {
        const error = new AnswerTooLargeError(max, 'event');
        onOversize?.(error);
        callback(error);
      } else callback(null, chunk);
    },
  });
}

/** Where the last event boundary (a blank line, in any of SSE's line endings) in `text` ends, or -1. */
function lastEventEnd(text: string): number {
  let end = -1;
  for (const boundary of ['\n\n', '\r\r', '\n\r\n']) {
    const at = text.lastIndexOf(boundary);
    if (at >= 0) end = Math.max(end, at + boundary.length);
  }
  return end;
}

async function* textChunks(body: AsyncIterable<unknown>, signal: RequestSignal): AsyncIterable<string> {
  const decoder = new TextDecoder();
  try {
    for await (const chunk of body) yield decoder.decode(chunk as Uint8Array, { stream: true });
  } catch (error) {
    throw fetchFailure(error, signal);
  }
}

/** undici takes a record or an iterable of pairs as fetch does, but reads an array as flat name, value, name... */
function requestHeaders(headers: RequestInit['headers']): Dispatcher.DispatchOptions['headers'] {
  if (headers === undefined) return null;
  if (Array.isArray(headers)) return headers.flat();
  return headers as Headers | Record<string, string>;
}

/** Response headers as pairs, a repeated header (`set-cookie`) once per value. */
function headerPairs(headers: Dispatcher.ResponseData['headers']): [string, string][] {
  const pairs: [string, string][] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value === 'string') pairs.push([name, value]);
    else if (value !== undefined) for (const each of value) pairs.push([name, each]);
  }
  return pairs;
}

function isEventStream(contentType: string | string[] | undefined): boolean {
  return typeof contentType === 'string' && contentType.split(';', 1)[0]!.trim().toLowerCase() === 'text/event-stream';
}

/** What global fetch rejects with: the signal's reason once aborted, else `TypeError('fetch failed')`. */
function fetchFailure(error: unknown, signal: { aborted: boolean; reason: unknown } | undefined): unknown {
  if (signal?.aborted) return signal.reason;
  return new TypeError('fetch failed', { cause: error });
}
