/**
 * The console (docs/cli.md, "The console"): a web page over a client ledger, a server store, or both, as one `node:http`
 * request handler that `closeout console` serves and an application mounts in its own server (node:http, Express,
 * or anything that hands over Node's request and response).
 *
 * - `GET /`: the page; `GET /assets/...`: its scripts and styles, shipped in the package (no CDN: it works offline).
 * - `GET /api/config`: the sources and the trace link template.
 * - `GET /api/{ledger|store}/tasks?status=&tool=&search=&cursor=&limit=`: a page, newest first, with counts.
 * - `GET /api/{ledger|store}/tasks/ID`: one record or task in full.
 * - `POST /api/{ledger|store}/tasks/ID/{answer|cancel|resubmit|follow}` and `POST /api/{ledger|store}/cancel` (every
 *   open task the filters select): JSON bodies, answered `{ ok, message }`.
 * - `GET /api/events?source=&...&detail=ID`: server-sent events (`list`, `detail`) whenever the view changes.
 *
 * Without `auth` every request must name a loopback host (a page of another site cannot reach it by DNS rebinding);
 * with it, the token is required (a bearer header, or the cookie `GET /?token=` sets). A POST must be JSON from the
 * page's own origin.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { Ledger } from '../client/ledger/ledger.js';
import type { TaskClient } from '../client/taskClient.js';
import type { TaskStore } from '../server/store/taskStore.js';
import type { ConnectLedgerClient } from './ledgerSource.js';
import { LedgerSource } from './ledgerSource.js';
import type { LiveView } from './liveView.js';
import { streamLiveView } from './liveView.js';
import { StoreSource } from './storeSource.js';
import type { ConsoleQuery, ConsoleSource, ConsoleStatus, SourceKind } from './view.js';
import { CONSOLE_STATUSES, ConsoleRequestError } from './view.js';

export interface ConsoleOptions {
  /** A client ledger to show (and act on through the client half). */
  ledger?: Ledger | undefined;
  /** How the ledger is named on the page (default "ledger"); never a password. */
  ledgerShown?: string | undefined;
  /**
   * A TaskClient on `ledger` for a server, for the actions (answer, cancel, resubmit, follow). Give it the handler's
   * `inputHandlers`, so inputs its polls bring wait for an answer in the page. Default: `connectHttpTaskClient` without
   * credentials, closed with the handler.
   */
  connect?: ConnectLedgerClient | undefined;
  /** A server task store to show (every caller's tasks: for operators). */
  store?: TaskStore | undefined;
  /** How the store is named on the page (default "store"); never a password. */
  storeShown?: string | undefined;
  /** Require this token on every request. Without it, only requests to a loopback host are served. */
  auth?: { token: string } | undefined;
  /** A link to a trace viewer, `{traceId}` replaced by a task's trace id, e.g. `http://127.0.0.1:16686/trace/{traceId}`. */
  traceLink?: string | undefined;
  /** How often a live page's view is read again. Default 400 ms (a change shows within a second). */
  liveIntervalMs?: number | undefined;
}

export interface ConsoleHandler {
  (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void;
  /** The input handlers for the TaskClients `ConsoleOptions.connect` returns (see there). */
  readonly inputHandlers: LedgerSource['inputHandlers'];
  /** Ends the live streams and lets go of what the console took up (leases, its own clients); not the ledger or store. */
  close(): Promise<void>;
}

/** The most tasks one bulk cancel touches. */
const MAX_BULK = 1000;
/** The most live streams at once: each reads its view every interval. */
const MAX_STREAMS = 32;
const MAX_BODY_BYTES = 1_000_000;
const COOKIE = 'closeout_console';

const WEB_DIR = fileURLToPath(new URL('./web/', import.meta.url));
const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** A console as a request handler; see the module comment for what it serves. */
export function createConsoleHandler(options: ConsoleOptions): ConsoleHandler {
  if (!options.ledger && !options.store) throw new TypeError('createConsoleHandler needs a ledger, a store, or both');
  if (options.auth && (typeof options.auth.token !== 'string' || options.auth.token.length < 16)) {
    throw new TypeError('auth.token must be a string of at least 16 characters');
  }
  const ownClients = new Map<string, Promise<TaskClient>>();
  let ledgerSource: LedgerSource | undefined;
  const connect: ConnectLedgerClient =
    options.connect ??
    ((endpoint) => {
      let client = ownClients.get(endpoint);
      if (!client) {
        client = import('../client/connect.js').then(({ connectHttpTaskClient }) =>
          connectHttpTaskClient(endpoint, {
            ledger: options.ledger!,
            endpoint,
            connectLater: false,
            inputHandlers: ledgerSource!.inputHandlers,
          }),
        );
        client.catch(() => ownClients.delete(endpoint));
        ownClients.set(endpoint, client);
      }
      return client;
    });
  const sources = new Map<SourceKind, ConsoleSource>();
  if (options.ledger) {
    ledgerSource = new LedgerSource(options.ledger, options.ledgerShown ?? 'ledger', connect);
    sources.set('ledger', ledgerSource);
  }
  if (options.store) sources.set('store', new StoreSource(options.store, options.storeShown ?? 'store'));
  const intervalMs = options.liveIntervalMs ?? 400;
  const streams = new Set<ServerResponse>();
  let page: Promise<{ html: string; csp: string }> | undefined;

  const source = (kind: string | undefined): ConsoleSource => {
    const found = sources.get(kind as SourceKind);
    if (!found)
      throw new ConsoleRequestError(404, `no ${kind} in this console: it shows ${[...sources.keys()].join(' and ')}`);
    return found;
  };

  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    const path = url.pathname;
    if (!allowed(req, url, res, options.auth?.token)) return;
    if (req.method === 'GET' && (path === '/' || path === '/index.html' || path === '')) {
      const original = (req as { originalUrl?: string }).originalUrl;
      // mounted under a prefix (Express strips it): the page's relative links need the trailing slash
      if (original !== undefined && !new URL(original, 'http://console.invalid').pathname.endsWith('/')) {
        res.writeHead(308, { location: `${new URL(original, 'http://console.invalid').pathname}/` }).end();
        return;
      }
      page ??= indexPage();
      const { html, csp } = await page.catch((error: unknown) => {
        page = undefined;
        throw error;
      });
      res.writeHead(200, {
        'content-type': CONTENT_TYPES['.html']!,
        'cache-control': 'no-store',
        'content-security-policy': csp,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      });
      res.end(html);
      return;
    }
    if (req.method === 'GET' && path.startsWith('/assets/')) return asset(path.slice('/assets/'.length), res);
    if (!path.startsWith('/api/')) throw new ConsoleRequestError(404, `nothing at ${path}`);
    const parts = path.slice('/api/'.length).split('/').map(decodeURIComponent);
    if (req.method === 'GET') {
      if (parts[0] === 'config' && parts.length === 1) {
        return json(res, 200, {
          sources: [...sources.values()].map((s) => ({ kind: s.kind, shown: s.shown, statuses: s.statuses })),
          traceLink: options.traceLink ?? null,
        });
      }
      if (parts[0] === 'events' && parts.length === 1) {
        const from = source(url.searchParams.get('source') ?? undefined);
        const query = queryOf(url.searchParams);
        const detail = url.searchParams.get('detail') ?? undefined;
        const listed = url.searchParams.get('list') !== '0';
        if (streams.size >= MAX_STREAMS) throw new ConsoleRequestError(503, 'too many live pages open: close some');
        streams.add(res);
        res.once('close', () => streams.delete(res));
        streamLiveView(
          req,
          res,
          async (): Promise<LiveView> => {
            const [list, shown] = await Promise.all([
              listed ? from.list(query) : undefined,
              detail === undefined ? undefined : from.detail(detail),
            ]);
            return { list, detail: detail === undefined ? undefined : (shown ?? null) };
          },
          intervalMs,
        );
        return;
      }
      const from = source(parts[0]);
      if (parts[1] === 'tasks' && parts.length === 2) return json(res, 200, await from.list(queryOf(url.searchParams)));
      if (parts[1] === 'tasks' && parts.length === 3) {
        const detail = await from.detail(parts[2]!);
        if (!detail) throw new ConsoleRequestError(404, `no ${parts[2]} in the ${from.kind} ${from.shown}`);
        return json(res, 200, detail);
      }
    }
    if (req.method === 'POST') {
      const body = await jsonBody(req);
      const from = source(parts[0]);
      if (parts[1] === 'cancel' && parts.length === 2) {
        return json(res, 200, await from.cancelAll(queryOf(bodyParams(body)), MAX_BULK));
      }
      if (parts[1] === 'tasks' && parts.length === 4) {
        const id = parts[2]!;
        switch (parts[3]) {
          case 'cancel':
            return json(res, 200, await from.cancel(id));
          case 'answer': {
            const { key, response } = body as { key?: unknown; response?: unknown };
            if (!from.answer) throw new ConsoleRequestError(405, `the ${from.kind} takes no answers: its callers do`);
            if (typeof key !== 'string') throw new ConsoleRequestError(400, 'key must be the input’s key (a string)');
            return json(res, 200, await from.answer(id, key, response));
          }
          case 'resubmit':
            if (!from.resubmit) throw new ConsoleRequestError(405, `the ${from.kind} resubmits nothing: clients do`);
            return json(res, 200, await from.resubmit(id));
          case 'follow':
            if (!from.follow) throw new ConsoleRequestError(405, `the ${from.kind} follows nothing: clients do`);
            return json(res, 200, await from.follow(id));
        }
      }
    }
    throw new ConsoleRequestError(404, `no ${req.method} ${path}`);
  };

  const handler = ((req: IncomingMessage, res: ServerResponse) => {
    serve(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (error instanceof ConsoleRequestError) return json(res, error.status, { error: error.message });
      // a failure of the client half or the store (a server that cannot be reached, say): said as it is
      json(res, 500, { error: error instanceof Error ? error.message : String(error) });
    });
  }) as ConsoleHandler;
  Object.defineProperty(handler, 'inputHandlers', { get: () => ledgerSource?.inputHandlers ?? {} });
  handler.close = async () => {
    for (const res of streams) res.end();
    streams.clear();
    for (const s of sources.values()) await s.close();
    for (const client of ownClients.values()) await (await client.catch(() => undefined))?.close();
    ownClients.clear();
  };
  return handler;
}

/** Whether the request may be served; when not, the answer is written. */
function allowed(req: IncomingMessage, url: URL, res: ServerResponse, token: string | undefined): boolean {
  if (token === undefined) {
    const host = (req.headers.host ?? '').toLowerCase();
    if (!/^(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$/.test(host)) {
      json(res, 403, { error: `the console without a token answers only on 127.0.0.1 or localhost, not ${host}` });
      return false;
    }
  } else {
    const given = url.searchParams.get('token');
    if (req.method === 'GET' && given !== null && (url.pathname === '/' || url.pathname === '') && same(given, token)) {
      // the link printed at start: the token moves to a cookie, out of the address bar and the history
      res.writeHead(303, {
        'set-cookie': `${COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/`,
        location: './',
      });
      res.end();
      return false;
    }
    const bearer = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const cookie = cookieValue(req.headers.cookie, COOKIE);
    if (!(bearer !== undefined && same(bearer, token)) && !(cookie !== undefined && same(cookie, token))) {
      json(res, 401, { error: 'this console needs its token: open the link `closeout console` printed' });
      return false;
    }
  }
  if (req.method === 'POST') {
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== 'null' && new URL(origin).host !== req.headers.host) {
      json(res, 403, { error: `a request from ${origin} may not act in this console` });
      return false;
    }
    if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '')) {
      json(res, 415, { error: 'send the action as application/json' });
      return false;
    }
  }
  return true;
}

function same(given: string, token: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) {
      try {
        return decodeURIComponent(value.join('='));
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/** The filters of a list, from the query string (or a bulk action's body). */
function queryOf(params: URLSearchParams): ConsoleQuery {
  const text = (name: string) => {
    const value = params.get(name)?.trim();
    return value === undefined || value === '' ? undefined : value;
  };
  const status = text('status')
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const s of status ?? []) {
    if (!CONSOLE_STATUSES.includes(s as ConsoleStatus)) {
      throw new ConsoleRequestError(
        400,
        `unknown status ${JSON.stringify(s)}: expected ${CONSOLE_STATUSES.join(', ')}`,
      );
    }
  }
  const limit = text('limit');
  if (limit !== undefined && !/^\d{1,4}$/.test(limit)) throw new ConsoleRequestError(400, 'limit must be a number');
  return {
    status: status?.length ? (status as ConsoleStatus[]) : undefined,
    tool: text('tool'),
    search: text('search'),
    cursor: text('cursor'),
    limit: limit === undefined ? undefined : Number(limit),
  };
}

function bodyParams(body: unknown): URLSearchParams {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries((body ?? {}) as Record<string, unknown>)) {
    if (typeof value === 'string') params.set(key, value);
    else if (Array.isArray(value)) params.set(key, value.join(','));
  }
  return params;
}

async function jsonBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ConsoleRequestError(413, 'the request body is too large');
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new ConsoleRequestError(400, 'the request body is not JSON');
  }
}

function json(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
  res.end(JSON.stringify(value));
}

/**
 * The page, and the Content-Security-Policy that lets it run nothing but its own files and its import map (by hash):
 * a value the page shows cannot become a script.
 */
async function indexPage(): Promise<{ html: string; csp: string }> {
  const html = await readFile(join(WEB_DIR, 'index.html'), 'utf8');
  const importMap = /<script type="importmap">([\s\S]*?)<\/script>/.exec(html)?.[1] ?? '';
  const hash = createHash('sha256').update(importMap).digest('base64');
  const csp = [
    "default-src 'none'",
    `script-src 'self' 'sha256-${hash}'`,
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { html, csp };
}

async function asset(name: string, res: ServerResponse): Promise<void> {
  const type = CONTENT_TYPES[extname(name)];
  if (!/^[A-Za-z0-9_-]+(\/[A-Za-z0-9_.-]+)?\.[a-z]+$/.test(name) || type === undefined) {
    throw new ConsoleRequestError(404, `no asset ${name}`);
  }
  let body: Buffer;
  try {
    body = await readFile(join(WEB_DIR, name));
  } catch {
    throw new ConsoleRequestError(404, `no asset ${name}`);
  }
  res.writeHead(200, { 'content-type': type, 'cache-control': 'no-cache', 'x-content-type-options': 'nosniff' });
  res.end(body);
}
