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
import { Readable } from 'node:stream';

import type { Dispatcher } from 'undici';
import { Agent } from 'undici';

/** A `fetch` on its own connection pool, and the way to close that pool. */
export interface HttpFetch {
  readonly fetch: typeof fetch;
  /** Close the pool's connections once the requests in flight have ended. Idempotent. */
  close(): Promise<void>;
}

// fetch follows these when they carry a Location (Fetch standard, "redirect status")
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
// `new Response` refuses a body with these (Fetch standard, "null body status"; 101 and 103 never reach a Response)
const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/**
 * Create a `fetch` whose requests share one keep-alive undici `Agent` serving every origin, http and https.
 * `agentOptions` tune the pool (keep-alive timeout, connections per origin, TLS); the defaults are those of the
 * Agent behind global fetch. The pool's idle sockets are unref'd by undici, so an unclosed pool never keeps the
 * process alive, but `close()` frees them at once.
 */
export function createHttpFetch(agentOptions: Agent.Options = {}): HttpFetch {
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
      return new Response(Readable.toWeb(answer.body) as ReadableStream<Uint8Array>, responseInit);
    }
    let bytes: Uint8Array;
    try {
      bytes = await answer.body.bytes();
    } catch (error) {
      throw fetchFailure(error, signal);
    }
    const noBody = NULL_BODY_STATUSES.has(statusCode) || method.toUpperCase() === 'HEAD';
    return new Response(noBody ? null : bytes, responseInit);
  };
  // a second agent.close() rejects once the first has finished, so the first is kept
  let closing: Promise<void> | undefined;
  return { fetch: httpFetch, close: () => (closing ??= agent.close()) };
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
function fetchFailure(error: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted) return signal.reason;
  return new TypeError('fetch failed', { cause: error });
}
