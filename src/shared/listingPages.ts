/**
 * What the listings of both halves share (the task stores' for operators, src/server/store/listing; the ledgers' for
 * people, src/client/ledger/recordListing.ts): newest first by a time and an id, a page ends at a position handed back
 * as an opaque cursor, an id prefix is read as a range of an index, and a query is checked by the same rules (its
 * limit, texts, statuses and cursor), each refusal thrown as the listing's own error.
 */
import { unstorableField, unstorableText } from '../protocol/storableText.js';

/** Items per page when a query gives no `limit`. */
export const DEFAULT_LISTING_LIMIT = 50;
/** The largest `limit` a query may give. */
export const MAX_LISTING_LIMIT = 1000;

/**
 * A listing query refused: says which field is wrong and why. Nothing was read. Each listing throws its own subclass
 * (TaskListQueryError, RecordListQueryError), named after it.
 */
export class ListingQueryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** What every listing's checked query holds: the statuses, page size and position its checks below give. */
export interface CheckedListingQuery<Status extends string> {
  /** Every status asked for, each once; undefined: any. */
  statuses: readonly Status[] | undefined;
  limit: number;
  /** Where the page before ended (its last item's time and id); undefined on the first page. */
  after: ListingPosition | undefined;
}

/** The error a listing refuses a query with. */
export type ListingRefusal = new (message: string) => ListingQueryError;

/** Where a page ended: the time and id of the last item listed. */
export type ListingPosition = readonly [time: number, id: string];

/** The cursor after `position`: opaque to callers (base64url of a small JSON array), stable across stores. */
export function encodeListingCursor(position: ListingPosition): string {
  return Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
}

/** The position a cursor of `encodeListingCursor` holds; undefined when it is not one. */
function decodeListingCursor(cursor: unknown): ListingPosition | undefined {
  if (typeof cursor !== 'string' || !/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
  if (
    !Array.isArray(value) ||
    value.length !== 2 ||
    !Number.isSafeInteger(value[0]) ||
    typeof value[1] !== 'string' ||
    unstorableText(value[1]) !== undefined
  ) {
    return undefined;
  }
  return [value[0] as number, value[1]];
}

/**
 * The page `rows` make, newest first (a statement reads at most one more than `limit`, to know whether another page
 * follows): the first `limit`, and the cursor after the last of them when more follow.
 */
export function listingPage<Item>(
  rows: readonly Item[],
  limit: number,
  positionOf: (item: Item) => ListingPosition,
): { items: Item[]; nextCursor: string | undefined } {
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return { items, nextCursor: rows.length > limit && last ? encodeListingCursor(positionOf(last)) : undefined };
}

/** The position a query's cursor holds (none without a cursor); refused when it is not one a listing returned. */
export function listingPosition(cursor: unknown, Refused: ListingRefusal): ListingPosition | undefined {
  if (cursor === undefined) return undefined;
  const position = decodeListingCursor(cursor);
  if (!position) throw new Refused('cursor is not one a listing returned (pass nextCursor as it came)');
  return position;
}

/** A query's page size: DEFAULT_LISTING_LIMIT when it gives none, else an integer from 1 to MAX_LISTING_LIMIT. */
export function listingLimit(value: unknown, Refused: ListingRefusal): number {
  const limit = value ?? DEFAULT_LISTING_LIMIT;
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LISTING_LIMIT) {
    throw new Refused(`limit must be an integer from 1 to ${MAX_LISTING_LIMIT}`);
  }
  return limit;
}

/** Text a filter may hold: a string both stores can compare (no NUL, no lone surrogate); refused otherwise. */
export function listingText(field: string, value: unknown, Refused: ListingRefusal): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new Refused(`${field} must be a string`);
  const refused = unstorableField(field, value);
  if (refused !== undefined) throw new Refused(refused);
  return value;
}

/** The statuses a query's `status` names: one of `known`, or a non-empty list of them; each once. */
export function listingStatuses<S extends string>(
  value: S | readonly S[] | undefined,
  known: readonly S[],
  Refused: ListingRefusal,
): readonly S[] | undefined {
  if (value === undefined) return undefined;
  const statuses: readonly unknown[] = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(statuses) || statuses.length === 0) {
    throw new Refused(`status must be one of ${known.join(', ')}, or a non-empty list of them`);
  }
  for (const status of statuses) {
    if (!known.includes(status as S)) {
      throw new Refused(`unknown status ${JSON.stringify(status)}: expected ${known.join(', ')}`);
    }
  }
  return [...new Set(statuses as S[])];
}

/**
 * The least string greater than every string that starts with `prefix`, in code point order (SQLite's BINARY
 * collation and PostgreSQL's "C" both compare UTF-8 bytes, which is code point order): the prefix with its last code
 * point raised by one. Undefined when there is none (a prefix of only U+10FFFF).
 */
export function prefixEnd(prefix: string): string | undefined {
  const points = [...prefix].map((c) => c.codePointAt(0)!);
  while (points.length > 0 && points.at(-1) === 0x10ffff) points.pop();
  if (points.length === 0) return undefined;
  let last = points.pop()! + 1;
  if (last === 0xd800) last = 0xe000; // past the surrogates, which no well-formed string holds
  return String.fromCodePoint(...points, last);
}
