/**
 * The client's fast path of a poll (issue 19): a waiting task is asked `tasks/get` every `pollIntervalMs`, and the
 * SDK's request path (Protocol, codec, transport, WHATWG `Headers` and signals) costs more client CPU than the HTTP
 * exchange itself (bench/RESULTS.md, sections 3, 4 and 20). Here an ordinary poll is one POST on the transport's own
 * connection pool, with no second encoding of the protocol:
 *
 * - The request is the SDK's. Every `tasks/get` the SDK's transport sends passes `observe` on its way to the pool,
 *   which keeps its headers and the envelope the SDK put in its `_meta` (protocol version, client info). A fast
 *   request is that request with another `taskId` (in `params` and in `Mcp-Name`), another JSON-RPC id, and the
 *   caller's own per-request `_meta` (the declared capabilities, the trace context) exactly as the SDK would carry
 *   it. Until the SDK has sent one, and whenever the last one it sent is not an ordinary 2026-07-28 `tasks/get`
 *   (a 2025-era connection, a session, an encoded `Mcp-Name`, `_meta` keys not known here), there is no fast path.
 * - The answer is decided here only when it is ordinary: HTTP 200 with a JSON-RPC result for this id and
 *   `resultType: "complete"` (the TaskClient then checks it with the same schema as any answer, serverOutput.ts); a
 *   JSON-RPC error for this id on 200 or 400, thrown as the SDK's `ProtocolError.fromError` makes it; a 429 or 503 as
 *   the same `HttpStatusError` the transport's fetch raises (transportFailure.ts); no answer at all as `fetch` fails.
 *   Anything else (a stream, another status, another id, a body that does not parse, another `resultType`) is not
 *   decided: `get` returns undefined and the caller asks again through the SDK, whose conclusion is the one the
 *   TaskClient acts on. A `tasks/get` is a pure read (SEP-2663), so asking twice changes nothing on the server.
 *
 * test/client/taskGetFastPath.test.ts sends the same polls, answered by the same valid and hostile servers, through
 * this path and through the SDK's alone, and compares what the server received and what the TaskClient concluded.
 */
import {
  BAGGAGE_META_KEY,
  CLIENT_CAPABILITIES_META_KEY,
  CLIENT_INFO_META_KEY,
  isJsonContentType,
  isJSONRPCErrorResponse,
  PROTOCOL_VERSION_META_KEY,
  ProtocolError,
  TRACEPARENT_META_KEY,
  TRACESTATE_META_KEY,
} from '@modelcontextprotocol/client';

import { TASK_METHODS } from '../protocol/index.js';
import type { HttpAnswer, HttpFetch } from './httpFetch.js';
import { overloadFailure } from './transportFailure.js';

/** The protocol revision whose answers this path decides (MCP 2026-07-28). */
const DECIDED_REVISION = '2026-07-28';

/** `_meta` keys the SDK adds to every request of the 2026-07-28 envelope: kept from the request it sent. */
const ENVELOPE_KEYS = [PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY] as const;

/** `_meta` keys a TaskClient's poll carries itself (taskRequests.ts, telemetry.ts): taken from each poll. */
const OWN_META_KEYS = new Set([
  CLIENT_CAPABILITIES_META_KEY,
  TRACEPARENT_META_KEY,
  TRACESTATE_META_KEY,
  BAGGAGE_META_KEY,
]);

/**
 * A taskId the SDK sends in `Mcp-Name` unchanged: no sentinel, no character its header encoding would touch
 * (SEP-2243). Closeout's own taskIds are base64url; anything else goes the SDK's way.
 */
const PLAIN_TASK_ID = /^[A-Za-z0-9._~-]{1,512}$/;

/** What the SDK's last ordinary `tasks/get` looked like on the wire. */
interface Template {
  /** Its headers, lower-cased, `mcp-name` left out. */
  headers: Record<string, string>;
  /** The SDK's part of its `_meta` (ENVELOPE_KEYS). */
  envelope: Record<string, unknown>;
  /** Its `clientCapabilities`, as JSON: a poll declaring anything else is not sent this way. */
  capabilities: string;
}

export class TaskGetFastPath {
  #template: Template | undefined;
  #nextId = 0;
  /** The polls in flight, aborted when the transport closes. */
  readonly #inFlight = new Set<AbortController>();
  #closed = false;
  /** The capabilities object last polled with, and whether it matched the template's (polls reuse one object). */
  #checked: { capabilities: unknown; template: Template; matches: boolean } | undefined;

  constructor(
    private readonly http: HttpFetch,
    private readonly url: URL,
  ) {}

  /** The fetch the SDK's transport sends through: each `tasks/get` it sends becomes the template, or clears it. */
  observe(base: typeof fetch): typeof fetch {
    return (input, init) => {
      if (init?.method === 'POST' && typeof init.body === 'string' && init.headers instanceof Headers) {
        if (init.headers.get('mcp-method') === TASK_METHODS.get) this.#template = learned(init.headers, init.body);
      }
      return base(input, init);
    };
  }

  /**
   * One `tasks/get` for `taskId` carrying `meta` (the poll's own `_meta`): the result (its `resultType` taken off, as
   * the SDK hands results over) when the answer was ordinary, undefined when the SDK must ask instead. Rejects when
   * the server is overloaded (429, 503) or did not answer.
   */
  async get(
    taskId: string,
    meta: Record<string, unknown>,
    timeoutMs: number,
  ): Promise<Record<string, unknown> | undefined> {
    const template = this.#template;
    if (!template || this.#closed || !PLAIN_TASK_ID.test(taskId)) return undefined;
    for (const key in meta) if (!OWN_META_KEYS.has(key)) return undefined;
    if (!this.#declaresAsTemplate(template, meta[CLIENT_CAPABILITIES_META_KEY])) return undefined;
    const id = `closeout-${++this.#nextId}`;
    // the SDK's order of members, and its envelope first: what the SDK itself would send for this taskId
    const body = JSON.stringify({
      method: TASK_METHODS.get,
      params: { taskId, _meta: { ...template.envelope, ...meta } },
      jsonrpc: '2.0',
      id,
    });
    const headers = { ...template.headers, 'mcp-name': taskId };
    const answer = await this.#post(headers, body, timeoutMs);
    if (!answer) return undefined;
    const overloaded = overloadFailure(answer.status, headerValue(answer.headers['retry-after']));
    if (overloaded) throw overloaded;
    // the transport hands over a JSON-RPC answer of HTTP 200, and the error of a 400 (SEP-2243's header refusals)
    if (answer.status !== 200 && answer.status !== 400) return undefined;
    if (!isJsonContentType(headerValue(answer.headers['content-type']) ?? null)) return undefined;
    return ordinaryAnswer(answer.text, id, answer.status);
  }

  #declaresAsTemplate(template: Template, capabilities: unknown): boolean {
    const checked = this.#checked;
    if (checked && checked.capabilities === capabilities && checked.template === template) return checked.matches;
    const matches = JSON.stringify(capabilities) === template.capabilities;
    this.#checked = { capabilities, template, matches };
    return matches;
  }

  /**
   * One POST within `timeoutMs` in all (undici's own timeouts bound the wait for each chunk, not for the whole answer
   * of a server that trickles it); undefined when the transport closed under it, so the SDK path reports that.
   */
  async #post(headers: Record<string, string>, body: string, timeoutMs: number): Promise<HttpAnswer | undefined> {
    const controller = new AbortController();
    const timer = setTimeout(
      () => controller.abort(new DOMException(`tasks/get timed out after ${timeoutMs} ms`, 'TimeoutError')),
      timeoutMs,
    );
    this.#inFlight.add(controller);
    try {
      return await this.http.post(this.url, headers, body, controller.signal, timeoutMs);
    } catch (error) {
      if (this.#closed) return undefined;
      throw error;
    } finally {
      clearTimeout(timer);
      this.#inFlight.delete(controller);
    }
  }

  /** Abort the polls in flight (the transport is closing) and send nothing more this way. */
  close(): void {
    this.#closed = true;
    for (const controller of this.#inFlight) controller.abort(new Error('the transport closed'));
  }
}

/** The template a `tasks/get` the SDK sent makes, or undefined when it is not an ordinary one (see the file's top). */
function learned(sent: Headers, body: string): Template | undefined {
  if (sent.get('mcp-protocol-version') !== DECIDED_REVISION || sent.has('mcp-session-id')) return undefined;
  let message: unknown;
  try {
    message = JSON.parse(body);
  } catch {
    return undefined;
  }
  const { jsonrpc, method, params } = (message ?? {}) as { jsonrpc?: unknown; method?: unknown; params?: unknown };
  if (jsonrpc !== '2.0' || method !== TASK_METHODS.get || !isPlainObject(params)) return undefined;
  const { taskId, _meta: meta, ...others } = params;
  if (Object.keys(others).length > 0 || typeof taskId !== 'string' || !isPlainObject(meta)) return undefined;
  if (sent.get('mcp-name') !== taskId || !PLAIN_TASK_ID.test(taskId)) return undefined;
  if (meta[PROTOCOL_VERSION_META_KEY] !== DECIDED_REVISION) return undefined;
  const envelope: Record<string, unknown> = {};
  for (const key of Object.keys(meta)) {
    if ((ENVELOPE_KEYS as readonly string[]).includes(key)) envelope[key] = meta[key];
    else if (!OWN_META_KEYS.has(key)) return undefined;
  }
  const headers: Record<string, string> = {};
  sent.forEach((value, name) => {
    if (name !== 'mcp-name') headers[name] = value;
  });
  return { headers, envelope, capabilities: JSON.stringify(meta[CLIENT_CAPABILITIES_META_KEY]) };
}

/**
 * The result of an ordinary JSON-RPC answer to request `id`; a JSON-RPC error thrown as the SDK hands it over
 * (`ProtocolError.fromError`, sdkGlue.ts point 2); undefined for anything else.
 */
function ordinaryAnswer(text: string, id: string, status: number): Record<string, unknown> | undefined {
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isPlainObject(message) || message['id'] !== id) return undefined;
  if ('error' in message) {
    if (!isJSONRPCErrorResponse(message)) return undefined;
    const { code, message: description, data } = message.error;
    throw ProtocolError.fromError(code, description, data);
  }
  if (status !== 200 || message['jsonrpc'] !== '2.0') return undefined;
  const result = message['result'];
  // basic/index "ResultType": a 2026-07-28 server MUST include it; an absent one is the SDK path's to judge
  if (!isPlainObject(result) || result['resultType'] !== 'complete') return undefined;
  const { resultType: _resultType, ...rest } = result;
  return rest;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
