/**
 * Telling a transport failure (no JSON-RPC answer arrived: connection refused, reset, timeout, HTTP 5xx, 429) from
 * an answer. A transport failure is backed off and recorded; it never turns a task into a failure (docs/REQUIREMENTS.md
 * S16).
 *
 * The SDK's Streamable HTTP transport drops response headers on HTTP errors, so `Retry-After` would be lost:
 * `retryAfterFetch` wraps the `fetch` a transport uses and turns 429 and 503 answers into `HttpStatusError`,
 * which keeps the server's `Retry-After`.
 */
import { SdkError, SdkErrorCode } from '@modelcontextprotocol/client';

export interface TransportFailure {
  kind: 'refused' | 'timeout' | 'http' | 'network';
  message: string;
  /** The HTTP status, for `http`. */
  status?: number | undefined;
  /** The server's Retry-After, in milliseconds from when it was received. */
  retryAfterMs?: number | undefined;
}

/** An HTTP answer that carried no JSON-RPC message, with the server's Retry-After when it gave one. */
export class HttpStatusError extends Error {
  readonly status: number;
  readonly retryAfterMs: number | undefined;

  constructor(status: number, retryAfterMs: number | undefined, message: string) {
    super(message);
    this.name = 'HttpStatusError';
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}

/** Parse a Retry-After header: delay-seconds or an HTTP date (RFC 9110 section 10.2.3). */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

/** A `fetch` for the SDK's HTTP transport that keeps Retry-After on 429 and 503 answers. */
export function retryAfterFetch(base: typeof fetch = fetch): typeof fetch {
  return async (input, init) => {
    const response = await base(input, init);
    const failure = overloadFailure(response.status, response.headers.get('retry-after'));
    if (failure) {
      await response.text().catch(() => undefined);
      throw failure;
    }
    return response;
  };
}

/** A 429 or 503 answer as the HttpStatusError that keeps its Retry-After; undefined for any other status. */
export function overloadFailure(status: number, retryAfter: string | null | undefined): HttpStatusError | undefined {
  if (status !== 429 && status !== 503) return undefined;
  const retryAfterMs = parseRetryAfter(retryAfter);
  return new HttpStatusError(
    status,
    retryAfterMs,
    `HTTP ${status}${retryAfterMs === undefined ? '' : ` (Retry-After ${retryAfterMs} ms)`}`,
  );
}

const NETWORK_CODES = new Set([
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

/** The transport failure `error` stands for, or undefined when it is something else (e.g. a JSON-RPC error). */
export function classifyTransportError(error: unknown): TransportFailure | undefined {
  if (error instanceof HttpStatusError) {
    return { kind: 'http', message: error.message, status: error.status, retryAfterMs: error.retryAfterMs };
  }
  if (error instanceof SdkError) {
    if (error.code === SdkErrorCode.RequestTimeout) return { kind: 'timeout', message: error.message };
    if (
      error.code === SdkErrorCode.ConnectionClosed ||
      error.code === SdkErrorCode.NotConnected ||
      error.code === SdkErrorCode.SendFailed
    ) {
      return { kind: 'network', message: error.message };
    }
    const status = (error.data as { status?: unknown } | undefined)?.status;
    if (typeof status === 'number') return { kind: 'http', message: error.message, status };
  }
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 5; depth += 1) {
    const code = (cause as { code?: unknown }).code;
    if (code === 'ECONNREFUSED') return { kind: 'refused', message: `connection refused: ${describe(error)}` };
    if (typeof code === 'string' && NETWORK_CODES.has(code)) {
      return {
        kind: code.includes('TIMEOUT') || code === 'ETIMEDOUT' ? 'timeout' : 'network',
        message: describe(error),
      };
    }
    cause = cause.cause;
  }
  if (error instanceof TypeError && error.message === 'fetch failed')
    return { kind: 'network', message: describe(error) };
  // an abort, or a deadline's (AbortSignal.timeout, the poll fast path's: DOMException 'TimeoutError')
  if (error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError')) {
    return { kind: 'timeout', message: error.message };
  }
  return undefined;
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return `${error.message}${cause}`;
}
