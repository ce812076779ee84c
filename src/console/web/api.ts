/**
 * The page's side of the console's JSON API (src/console/consoleHandler.ts): relative URLs, so the console works
 * wherever it is mounted, and the view's filters as the query string the API and the address bar share.
 */
import type { ConsoleActionResult, ConsoleStatus, SourceKind } from '../view.js';

export interface Config {
  sources: Array<{ kind: SourceKind; shown: string; statuses: ConsoleStatus[] }>;
  traceLink: string | null;
}

/** The list's filters. */
export interface Filters {
  status: ConsoleStatus[];
  tool: string;
  search: string;
}

export const NO_FILTERS: Filters = { status: [], tool: '', search: '' };

export function filterParams(filters: Filters, cursor?: string): URLSearchParams {
  const params = new URLSearchParams();
  if (filters.status.length > 0) params.set('status', filters.status.join(','));
  if (filters.tool.trim()) params.set('tool', filters.tool.trim());
  if (filters.search.trim()) params.set('search', filters.search.trim());
  if (cursor) params.set('cursor', cursor);
  return params;
}

export function filtersOf(params: URLSearchParams): Filters {
  return {
    status: (params.get('status') ?? '').split(',').filter(Boolean) as ConsoleStatus[],
    tool: params.get('tool') ?? '',
    search: params.get('search') ?? '',
  };
}

/** What the page shows, from the address's hash: `#/ledger?status=...` (a list) or `#/ledger/ID` (one task). */
export interface Route {
  source: SourceKind | undefined;
  id: string | undefined;
  filters: Filters;
}

export function parseRoute(hash: string): Route {
  const [path = '', query = ''] = hash.replace(/^#\/?/, '').split('?');
  const [source, ...rest] = path.split('/');
  return {
    source: source === 'ledger' || source === 'store' ? source : undefined,
    id: rest.length > 0 && rest.join('/') !== '' ? decodeURIComponent(rest.join('/')) : undefined,
    filters: filtersOf(new URLSearchParams(query)),
  };
}

export function listHref(source: SourceKind, filters: Filters): string {
  const query = filterParams(filters).toString();
  return `#/${source}${query ? `?${query}` : ''}`;
}

export function detailHref(source: SourceKind, id: string): string {
  return `#/${source}/${encodeURIComponent(id)}`;
}

async function answerOf<T>(response: Response): Promise<T> {
  const body = (await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }))) as T & {
    error?: string;
  };
  if (!response.ok) throw new Error(body.error ?? `${response.status} ${response.statusText}`);
  return body;
}

export async function getJson<T>(path: string): Promise<T> {
  return answerOf<T>(await fetch(path, { headers: { accept: 'application/json' } }));
}

export async function postAction(path: string, body: unknown = {}): Promise<ConsoleActionResult> {
  return answerOf<ConsoleActionResult>(
    await fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
  );
}

/** An age in its largest unit: "now", "12s", "4m", "3h", "2d". */
export function formatAge(ms: number): string {
  const units: Array<[number, string]> = [
    [86_400_000, 'd'],
    [3_600_000, 'h'],
    [60_000, 'm'],
    [1_000, 's'],
  ];
  for (const [size, unit] of units) if (ms >= size) return `${Math.floor(ms / size)}${unit}`;
  return 'now';
}

export function formatTime(at: number): string {
  return new Date(at).toISOString().replace('T', ' ').replace('Z', ' UTC');
}
