/**
 * The console's live updates: one server-sent event stream per open page, for the view it shows (a list with its
 * filters, a detail). The view is read again every `intervalMs` (a page of an indexed listing, its counts, one task:
 * cheap whatever the store holds) and sent only when it changed, so a change anywhere (another process, another
 * instance, the console's own actions) is on the page within a second, with nothing to set up in the ledger or store.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

import type { ConsoleDetail, ConsoleList } from './view.js';

export interface LiveView {
  list?: ConsoleList | undefined;
  /** `null`: the task asked for is not (or no longer) there. */
  detail?: ConsoleDetail | null | undefined;
}

/** An SSE comment this often keeps proxies from closing a quiet stream. */
const KEEPALIVE_MS = 15_000;

/** Streams `read()` to the page until it goes away; `read` failing sends a `problem` event and the stream goes on. */
export function streamLiveView(
  req: IncomingMessage,
  res: ServerResponse,
  read: () => Promise<LiveView>,
  intervalMs: number,
): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-store',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  res.write('retry: 1000\n\n');
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  const sent: Record<string, string> = {};
  let lastWrite = Date.now();
  const send = (event: string, value: unknown) => {
    // the source's clock moves on every read: a change is a change of anything else
    const shown = JSON.stringify(value, (key, v: unknown) => (key === 'now' ? undefined : v));
    if (sent[event] === shown) return;
    sent[event] = shown;
    res.write(`event: ${event}\ndata: ${JSON.stringify(value)}\n\n`);
    lastWrite = Date.now();
  };
  const tick = async () => {
    try {
      const view = await read();
      if (closed) return;
      if (view.list !== undefined) send('list', view.list);
      if (view.detail !== undefined) send('detail', view.detail);
      delete sent['problem'];
    } catch (error) {
      if (closed) return;
      send('problem', { error: error instanceof Error ? error.message : String(error) });
    }
    if (Date.now() - lastWrite >= KEEPALIVE_MS) {
      res.write(': keepalive\n\n');
      lastWrite = Date.now();
    }
    if (!closed) timer = setTimeout(() => void tick(), intervalMs);
  };
  const stop = () => {
    closed = true;
    clearTimeout(timer);
  };
  req.once('close', stop);
  res.once('close', stop);
  void tick();
}
