/**
 * The client's fast path of a poll: a waiting task is asked `tasks/get` every `pollIntervalMs`, and the
 * SDK's request path (Protocol, codec, transport, WHATWG `Headers` and signals) costs more client CPU than the HTTP
 * exchange itself (bench/RESULTS.md, sections 3, 4 and 20). Here an ordinary poll is one POST on the transport's own
 * connection pool, with no second encoding of the protocol:
 *
 * - The request is the SDK's. A TaskClient's poll sent through the SDK (`throughSdk`) passes `observe` on its way to
 *   the pool, which keeps its headers and the envelope the SDK put in its `_meta` (protocol version, client info),
 *   once the server has answered it with HTTP 200. A fast request is that request with another `taskId` (in `params` and in `Mcp-Name`), another JSON-RPC id, and
 *   the poll's own per-request `_meta` (the declared capabilities, the trace context) as the SDK would carry it. There
 *   is no fast path until the SDK has sent such a poll, whenever its last one was not an ordinary 2026-07-28
 *   `tasks/get` (a 2025-era connection, a session, an encoded `Mcp-Name`, `_meta` keys not known here), once the
 *   caller's `requestInit` headers changed (a rotated token), and TEMPLATE_LIFE_MS after it was learned (whatever
 *   else the SDK would send differently by then, its next poll shows).
 * - The answer is decided here only when it is ordinary: HTTP 200 with a JSON-RPC result for this id that the SDK's
 *   own schema accepts (the JSON body, or the first message event of a stream, parsed by the SDK's SSE parser), with `resultType: "complete"` (the TaskClient then checks the task with the same schema as
 *   any answer, serverOutput.ts); a JSON-RPC error for this id on 200 or 400, thrown as the SDK's
 *   `ProtocolError.fromError` makes it; a 429 or 503 as the same `HttpStatusError` the transport's fetch raises
 *   (transportFailure.ts); no answer at all as `fetch` fails. Anything else (a stream, another status, another id, a
 *   body that does not parse, another `resultType`, a stream whose first message is another) is not decided: `get` returns undefined, unread bodies are
 *   dropped at their headers, and the caller asks again through the SDK, whose conclusion is the one the TaskClient
 *   acts on. A `tasks/get` is a pure read (SEP-2663): asking twice changes nothing on the server, and the state the
 *   dropped answer carried is the state the second one reads.
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
  isJSONRPCResultResponse,
  PROTOCOL_VERSION_META_KEY,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  TRACEPARENT_META_KEY,
  TRACESTATE_META_KEY,
} from '@modelcontextprotocol/client';
import { createParser } from 'eventsource-parser';

import { TASK_METHODS } from '../../protocol/index.js';
import type { HttpAnswer, HttpFetch } from './httpFetch.js';
import { RequestSignal } from './httpFetch.js';
import { overloadFailure } from './transportFailure.js';

/** The protocol revision whose answers this path decides (MCP 2026-07-28). */
const DECIDED_REVISION = '2026-07-28';

/** `_meta` keys the SDK adds to every request of the 2026-07-28 envelope: kept from the request it sent. */
const ENVELOPE_KEYS: readonly string[] = [PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY];

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

/** A fast request's body up to its taskId (see `get`). */
const BODY_HEAD = `{"method":${JSON.stringify(TASK_METHODS.get)},"params":{"taskId":`;

/** How long a learned request stands in for the SDK's: one poll a minute goes through the SDK, whatever the load. */
const TEMPLATE_LIFE_MS = 60_000;

/** What the SDK's last ordinary `tasks/get` looked like on the wire. */
interface Template {
  /** Its headers, lower-cased, `mcp-name` left out: name, value, name, value... (undici's flat form). */
  headers: readonly string[];
  /** The SDK's part of its `_meta` (ENVELOPE_KEYS). */
  envelope: Record<string, unknown>;
  /** Its `clientCapabilities`, as JSON: a poll declaring anything else is not sent this way. */
  capabilities: string;
  /** The caller's `requestInit` headers when it was sent (see `initHeaders`). */
  initHeaders: string;
  /** When it was learned (performance.now()). */
  learnedAt: number;
}

export class TaskGetFastPath {
  #template: Template | undefined;
  #nextId = 0;
  /** taskIds whose poll is on its way through the SDK: only those teach the template (no other request of the app). */
  readonly #learning = new Set<string>();
  /** The polls in flight, aborted when the transport closes. */
  readonly #inFlight = new Set<RequestSignal>();
  #closed = false;
  /** The capabilities object last polled with, and whether it matched the template's (polls reuse one object). */
  #checked: { capabilities: unknown; template: Template; matches: boolean } | undefined;
  /** The `_meta` JSON of the last poll that carried its capabilities alone (`metaJson`). */
  #written: { template: Template; capabilities: unknown; json: string } | undefined;

  constructor(
    private readonly http: HttpFetch,
    private readonly url: URL,
    private readonly requestInit: RequestInit | undefined,
  ) {}

  /** The fetch the SDK's transport sends through: a TaskClient poll it sends becomes the template, or clears it. */
  observe(base: typeof fetch): typeof fetch {
    return async (input, init) => {
      const taskId = this.#learning.size > 0 ? polledTaskId(init) : undefined;
      if (taskId === undefined || !this.#learning.has(taskId)) return base(input, init);
      const candidate = learned(init!.headers as Headers, init!.body as string, this.#initHeaders());
      this.#template = undefined;
      const response = await base(input, init);
      // learned once the server answered it: a request it refused is no template
      if (candidate && response.status === 200) this.#template = candidate;
      return response;
    };
  }

  /** Send one poll of `taskId` through the SDK (`send`), and learn the fast request from it. */
  async throughSdk<T>(taskId: string, send: () => Promise<T>): Promise<T> {
    this.#learning.add(taskId);
    try {
      return await send();
    } finally {
      this.#learning.delete(taskId);
    }
  }

  /**
   * One `tasks/get` for `taskId` carrying `meta` (the poll's own `_meta`) within `timeoutMs`: the result (its
   * `resultType` taken off, as the SDK hands results over) when the answer was ordinary, undefined when the SDK must
   * ask instead. Rejects as the SDK's path would: a ProtocolError, an overload (429, 503), no answer.
   */
  async get(
    taskId: string,
    meta: Record<string, unknown>,
    timeoutMs: number,
  ): Promise<Record<string, unknown> | undefined> {
    const template = this.#usableTemplate();
    if (!template || !PLAIN_TASK_ID.test(taskId)) return undefined;
    for (const key in meta) if (!OWN_META_KEYS.has(key)) return undefined;
    if (!this.#declaresAsTemplate(template, meta[CLIENT_CAPABILITIES_META_KEY])) return undefined;
    const id = `closeout-${++this.#nextId}`;
    // the SDK's order of members, and its envelope first: what the SDK itself would send for this taskId, as
    // JSON.stringify writes that object ({ method, params: { taskId, _meta }, jsonrpc, id })
    const body = `${BODY_HEAD}${JSON.stringify(taskId)},"_meta":${this.#metaJson(template, meta)}},"jsonrpc":"2.0","id":${JSON.stringify(id)}}`;
    return this.#exchange([...template.headers, 'mcp-name', taskId], body, id, timeoutMs);
  }

  /** Abort the polls in flight (the transport is closing; they fail as the SDK's do) and send nothing more this way. */
  close(): void {
    this.#closed = true;
    for (const signal of this.#inFlight) signal.abort(new Error('the transport closed'));
  }

  #usableTemplate(): Template | undefined {
    const template = this.#template;
    if (!template || this.#closed) return undefined;
    if (performance.now() - template.learnedAt > TEMPLATE_LIFE_MS || template.initHeaders !== this.#initHeaders()) {
      this.#template = undefined;
      return undefined;
    }
    return template;
  }

  /** The caller's own headers as the SDK's transport reads them for every request, as one comparable string. */
  #initHeaders(): string {
    const headers = this.requestInit?.headers;
    if (headers === undefined) return '';
    const pairs: string[] = [];
    new Headers(headers).forEach((value, name) => pairs.push(name, value));
    return JSON.stringify(pairs);
  }

  /**
   * The poll's `_meta` as JSON: the template's envelope, then the poll's own keys. A poll that carries its declared
   * capabilities alone (no trace context) reuses the text written for the last such poll of the same objects.
   */
  #metaJson(template: Template, meta: Record<string, unknown>): string {
    const capabilities = meta[CLIENT_CAPABILITIES_META_KEY];
    for (const key in meta) {
      if (key !== CLIENT_CAPABILITIES_META_KEY) return JSON.stringify({ ...template.envelope, ...meta });
    }
    const written = this.#written;
    if (written?.template === template && written.capabilities === capabilities) return written.json;
    const json = JSON.stringify({ ...template.envelope, ...meta });
    this.#written = { template, capabilities, json };
    return json;
  }

  #declaresAsTemplate(template: Template, capabilities: unknown): boolean {
    const checked = this.#checked;
    if (checked && checked.capabilities === capabilities && checked.template === template) return checked.matches;
    const matches = JSON.stringify(capabilities) === template.capabilities;
    this.#checked = { capabilities, template, matches };
    return matches;
  }

  /**
   * The POST and what it comes to, all within `timeoutMs` (undici's own timeouts bound the wait for each chunk, not
   * for the whole answer of a server that trickles it).
   */
  async #exchange(
    headers: string[],
    body: string,
    id: string,
    timeoutMs: number,
  ): Promise<Record<string, unknown> | undefined> {
    const signal = new RequestSignal();
    const timer = setTimeout(
      () => signal.abort(new DOMException(`tasks/get timed out after ${timeoutMs} ms`, 'TimeoutError')),
      timeoutMs,
    );
    this.#inFlight.add(signal);
    try {
      const answer = await this.http.post(this.url, headers, body, signal);
      return ordinaryAnswer(await decidedMessage(answer), id, answer.status);
    } catch (error) {
      // as the SDK rejects its requests in flight when its transport closes
      if (this.#closed) throw new SdkError(SdkErrorCode.ConnectionClosed, 'Connection closed');
      throw error;
    } finally {
      clearTimeout(timer);
      this.#inFlight.delete(signal);
    }
  }
}

/**
 * The JSON-RPC message of an answer this path decides: a JSON body read whole, or the first message event of a
 * stream (the SDK's transport takes events named `message` or unnamed, and skips those without data); undefined
 * for any other answer, and for a stream whose first message is not a JSON-RPC answer. The rest of the body is
 * dropped unread.
 */
async function decidedMessage(answer: HttpAnswer): Promise<unknown> {
  const overloaded = overloadFailure(answer.status, headerValue(answer.headers['retry-after']));
  const contentType = headerValue(answer.headers['content-type']);
  // the transport hands over a JSON-RPC answer of HTTP 200, and the error of a 400 (SEP-2243's header refusals)
  const json = (answer.status === 200 || answer.status === 400) && isJsonContentType(contentType);
  const stream = answer.status === 200 && isEventStream(contentType);
  if (overloaded || !(json || stream)) {
    answer.discard();
    if (overloaded) throw overloaded;
    return undefined;
  }
  try {
    return parsed(json ? await answer.text() : await firstMessageEvent(answer.chunks()));
  } finally {
    if (stream) answer.discard();
  }
}

/** The data of the first message event with data in an SSE body, or undefined when the body ends first. */
async function firstMessageEvent(chunks: AsyncIterable<string>): Promise<string | undefined> {
  let found: string | undefined;
  const parser = createParser({
    onEvent: (event) => {
      if (found === undefined && event.data !== '' && (!event.event || event.event === 'message')) found = event.data;
    },
  });
  for await (const chunk of chunks) {
    parser.feed(chunk);
    if (found !== undefined) return found;
  }
  return undefined;
}

function parsed(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isEventStream(contentType: string | undefined): boolean {
  return contentType?.split(';', 1)[0]!.trim().toLowerCase() === 'text/event-stream';
}

/** The taskId of a `tasks/get` about to leave through the SDK's transport, if `init` is one. */
function polledTaskId(init: RequestInit | undefined): string | undefined {
  if (init?.method !== 'POST' || typeof init.body !== 'string' || !(init.headers instanceof Headers)) return undefined;
  if (init.headers.get('mcp-method') !== TASK_METHODS.get) return undefined;
  return init.headers.get('mcp-name') ?? undefined;
}

/** The template a `tasks/get` the SDK sent makes, or undefined when it is not an ordinary one (see the file's top). */
function learned(sent: Headers, body: string, initHeaders: string): Template | undefined {
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
    if (ENVELOPE_KEYS.includes(key)) envelope[key] = meta[key];
    else if (!OWN_META_KEYS.has(key)) return undefined;
  }
  const headers: string[] = [];
  sent.forEach((value, name) => {
    if (name !== 'mcp-name') headers.push(name, value);
  });
  return {
    headers,
    envelope,
    capabilities: JSON.stringify(meta[CLIENT_CAPABILITIES_META_KEY]),
    initHeaders,
    learnedAt: performance.now(),
  };
}

/**
 * The result of an ordinary JSON-RPC answer to request `id`, judged by the SDK's own message schemas; a JSON-RPC
 * error thrown as the SDK hands it over (`ProtocolError.fromError`, sdkGlue.ts point 2); undefined for anything else.
 */
function ordinaryAnswer(message: unknown, id: string, status: number): Record<string, unknown> | undefined {
  if (!isPlainObject(message) || message['id'] !== id) return undefined;
  // the SDK's guards build an error for every message they refuse: each is asked only about what it may accept
  if ('error' in message && isJSONRPCErrorResponse(message)) {
    const { code, message: description, data } = message.error;
    throw ProtocolError.fromError(code, description, data);
  }
  if (status !== 200 || !isJSONRPCResultResponse(message)) return undefined;
  const result = message.result as Record<string, unknown>;
  // basic/index "ResultType": a 2026-07-28 server MUST include it; an absent one is the SDK path's to judge
  if (result['resultType'] !== 'complete') return undefined;
  const { resultType: _resultType, ...rest } = result;
  return rest;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A header as fetch's `Headers.get` gives it: repeated values joined with ", ". */
function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}
