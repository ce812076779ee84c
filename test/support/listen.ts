/**
 * A raw `subscriptions/listen` client for tests: sends the request as the 2026-07-28 wire expects it and reads the SSE
 * answer message by message, with no SDK between the test and the bytes.
 */
import { DEFAULT_CLIENT_INFO } from '../../src/client/connect.js';
import { PROTOCOL_VERSION, TASKS } from './rpc.js';

export interface JsonRpcMessage {
  jsonrpc: '2.0';
  id?: string | number;
  method?: string;
  params?: Record<string, unknown> & { _meta?: Record<string, unknown> };
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
}

export interface ListenStream {
  httpStatus: number;
  /** Every message received so far, in order. */
  messages: JsonRpcMessage[];
  /** Whether the server ended the body. */
  ended: () => boolean;
  /** Waits (bounded) for the first message, from index `from`, that `match` accepts. */
  next: (match: (message: JsonRpcMessage) => boolean, from?: number, timeoutMs?: number) => Promise<JsonRpcMessage>;
  /** Waits (bounded) for the end of the body. */
  closed: (timeoutMs?: number) => Promise<void>;
  abort: () => void;
}

let nextId = 1000;

export async function listen(
  url: string,
  taskIds: unknown,
  options: {
    token?: string;
    declareTasks?: boolean;
    id?: string | number;
    extra?: Record<string, unknown>;
    /** Headers to override. */
    headers?: Record<string, string>;
  } = {},
): Promise<ListenStream> {
  const id = options.id ?? nextId++;
  const controller = new AbortController();
  const capabilities = options.declareTasks === false ? {} : { extensions: { [TASKS]: {} } };
  const response = await fetch(url, {
    method: 'POST',
    signal: controller.signal,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL_VERSION,
      'mcp-method': 'subscriptions/listen',
      ...(options.token && { authorization: `Bearer ${options.token}` }),
      ...options.headers,
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id,
      method: 'subscriptions/listen',
      params: {
        _meta: {
          'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
          'io.modelcontextprotocol/clientInfo': DEFAULT_CLIENT_INFO,
          'io.modelcontextprotocol/clientCapabilities': capabilities,
        },
        notifications: { taskIds, ...options.extra },
      },
    }),
  });
  const messages: JsonRpcMessage[] = [];
  let done = false;
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const waiter of waiters) waiter();
  };
  const reading = (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        if (!(response.headers.get('content-type') ?? '').includes('text/event-stream')) continue;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame
            .split('\n')
            .filter((line) => line.startsWith('data:'))
            .map((line) => line.slice(5).trim())
            .join('');
          if (data.length > 0) messages.push(JSON.parse(data) as JsonRpcMessage);
        }
        notify();
      }
      if (!(response.headers.get('content-type') ?? '').includes('text/event-stream') && buffer.length > 0) {
        messages.push(JSON.parse(buffer) as JsonRpcMessage);
      }
    } catch {
      // aborted, or the server cut the stream
    }
    done = true;
    notify();
  })();
  const waitUntil = async (what: string, ready: () => boolean, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!ready()) {
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 50);
        waiters.add(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      waiters.clear();
    }
  };
  return {
    httpStatus: response.status,
    messages,
    ended: () => done,
    next: async (match, from = 0, timeoutMs = 10_000) => {
      let found: JsonRpcMessage | undefined;
      await waitUntil(
        'a matching message',
        () => (found = messages.slice(from).find(match)) !== undefined || done,
        timeoutMs,
      );
      if (!found) {
        throw new Error(`the stream ended without a matching message; got ${JSON.stringify(messages).slice(0, 2000)}`);
      }
      return found;
    },
    closed: async (timeoutMs = 10_000) => {
      await waitUntil('the end of the stream', () => done, timeoutMs);
      await reading;
    },
    abort: () => controller.abort(),
  };
}

/** A `notifications/tasks` message for `taskId` in status `status`. */
export function taskNotification(taskId: string, status?: string): (message: JsonRpcMessage) => boolean {
  return (message) =>
    message.method === 'notifications/tasks' &&
    message.params?.['taskId'] === taskId &&
    (status === undefined || message.params['status'] === status);
}

/** The params of a notification without its `_meta` (what tasks/get answers, minus the result's own stamps). */
export function withoutMeta(params: Record<string, unknown> | undefined): Record<string, unknown> {
  const { _meta: _ignored, ...rest } = params ?? {};
  return rest;
}
