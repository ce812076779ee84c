/**
 * What the console's two sources (ledgerSource.ts, storeSource.ts) share when they list: a listing query the ledger or
 * store refuses is the page's mistake (400), and "cancel all" reads the rows it cancels a page at a time.
 */
import { ListingQueryError } from '../shared/listingPages.js';
import type { ConsoleList, ConsoleQuery, ConsoleRow } from './view.js';
import { ConsoleRequestError } from './view.js';

/** A `.catch` of a listing: a query refused (TaskListQueryError, RecordListQueryError) is a 400; the rest as it is. */
export function refusedQuery(error: unknown): never {
  if (error instanceof ListingQueryError) throw new ConsoleRequestError(400, error.message);
  throw error;
}

/** The ids of the first `max` rows `list` selects that `wanted` keeps, read at most 500 rows a page. */
export async function listedIds(
  list: (query: ConsoleQuery) => Promise<ConsoleList>,
  query: ConsoleQuery,
  max: number,
  wanted: (row: ConsoleRow) => boolean = () => true,
): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await list({ ...query, cursor, limit: Math.min(max - ids.length, 500) });
    ids.push(...page.rows.filter(wanted).map((row) => row.id));
    cursor = page.nextCursor;
  } while (cursor !== undefined && ids.length < max);
  return ids;
}
