/**
 * Push over stdio: `subscriptions/listen` with `notifications.taskIds` (SEP-2663) on the one stdio channel. Over HTTP
 * each subscription is an SSE stream of its own (http.ts); over stdio its messages (the acknowledgement, each
 * `notifications/tasks`, the completion result) are written to stdout among the connection's other messages, as the
 * spec's subscriptions page has them on a transport without streams per request. The SDK's own listen router cannot
 * carry task notifications (the same reason http.ts serves them beside it), so this transport takes those listen
 * requests, and the client's `notifications/cancelled` for them, before the SDK sees them; everything else passes
 * through untouched.
 *
 * The stream's messages are read from the same PushStream the HTTP path serves, one at a time as stdout takes them:
 * a host that does not read stdout holds the stream's buffer (`push.bufferBytes`), never more. A stream the server cut
 * (its reader fell too far behind) ends with a JSON-RPC error for the listen request, so the client subscribes again
 * (over HTTP the dropped connection says the same).
 */
import type { JSONRPCMessage, MessageExtraInfo, Transport, TransportSendOptions } from '@modelcontextprotocol/server';

import { CLIENT_CAPABILITIES_META_KEY } from '../protocol/constants.js';
import { ErrorCode } from '../protocol/index.js';
import { declaresTasksIn } from './sdkGlue.js';
import type { ListenRequest } from './taskPush.js';
import { taskListenOf } from './taskPush.js';
import type { TaskServer } from './taskServer.js';

export class TaskListenTransport implements Transport {
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  onclose?: () => void;
  onerror?: (error: Error) => void;
  /** The subscriptions being served, by their request id: aborted by the client's cancellation or the end. */
  private readonly listens = new Map<string | number, AbortController>();

  constructor(
    private readonly inner: Transport,
    private readonly tasks: TaskServer,
    private readonly principal: string,
    private readonly serverInfo: { name: string; version: string },
  ) {
    inner.onmessage = (message, extra) => this.receive(message, extra);
    inner.onclose = () => {
      this.stopAll();
      this.onclose?.();
    };
    inner.onerror = (error) => this.onerror?.(error);
  }

  start(): Promise<void> {
    return this.inner.start();
  }

  send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    return this.inner.send(message, options);
  }

  close(): Promise<void> {
    this.stopAll();
    return this.inner.close();
  }

  private stopAll(): void {
    for (const listen of this.listens.values()) listen.abort();
    this.listens.clear();
  }

  private receive(message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    const listen = taskListenOf(message);
    if (listen) {
      void this.serve(listen).catch((error: unknown) => this.onerror?.(asError(error)));
      return;
    }
    const cancelled = cancelledRequestOf(message);
    const served = cancelled === undefined ? undefined : this.listens.get(cancelled);
    if (served) {
      // spec (subscriptions, Cancellation): the subscription ends, and nothing more is sent for it
      this.listens.delete(cancelled!);
      served.abort();
      return;
    }
    this.onmessage?.(message, extra);
  }

  private async serve(listen: ListenRequest): Promise<void> {
    const controller = new AbortController();
    this.listens.set(listen.id, controller);
    try {
      const response = await this.tasks.push.listen(
        listen,
        this.principal,
        declaresTasksIn(listen.params._meta?.[CLIENT_CAPABILITIES_META_KEY]),
        controller.signal,
        this.serverInfo,
      );
      let answered = false;
      try {
        for await (const message of messagesOf(response)) {
          if (controller.signal.aborted) return;
          await this.inner.send(message);
          answered ||= 'id' in message;
        }
      } catch (error) {
        // the stream errors when it is cut: by the client's cancellation (nothing more to say), or for falling behind
        if (controller.signal.aborted) return;
        this.onerror?.(asError(error));
      }
      if (!answered && !controller.signal.aborted) {
        await this.inner.send({
          jsonrpc: '2.0',
          id: listen.id,
          error: {
            code: ErrorCode.InternalError,
            message: 'Subscription dropped: its notifications were not read in time; subscribe again',
          },
        });
      }
    } finally {
      if (this.listens.get(listen.id) === controller) this.listens.delete(listen.id);
    }
  }
}

/** The request id a `notifications/cancelled` names, or undefined. */
function cancelledRequestOf(message: JSONRPCMessage): string | number | undefined {
  if (!('method' in message) || message.method !== 'notifications/cancelled' || 'id' in message) return undefined;
  const requestId = (message.params as { requestId?: unknown } | undefined)?.requestId;
  return typeof requestId === 'string' || typeof requestId === 'number' ? requestId : undefined;
}

/** The JSON-RPC messages of a listen's answer: one JSON body (a refusal), or the data of each SSE event as it comes. */
async function* messagesOf(response: Response): AsyncGenerator<JSONRPCMessage> {
  if (!response.headers.get('content-type')?.includes('text/event-stream')) {
    yield (await response.json()) as JSONRPCMessage;
    return;
  }
  if (!response.body) return;
  const decoder = new TextDecoder();
  let pending = '';
  for await (const chunk of response.body) {
    pending += decoder.decode(chunk as Uint8Array, { stream: true });
    let end: number;
    while ((end = pending.indexOf('\n\n')) >= 0) {
      const event = pending.slice(0, end);
      pending = pending.slice(end + 2);
      const data = event
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice('data: '.length))
        .join('\n');
      if (data !== '') yield JSON.parse(data) as JSONRPCMessage;
    }
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
