/**
 * What the listings of both halves share (the task stores' for operators, src/server/store/listing; the ledgers' for
 * people, src/client/ledger/recordListing.ts): newest first by a time and an id, a page ends at a position handed back
 * as an opaque cursor, and an id prefix is read as a range of an index.
 */
import { unstorableField, unstorableText } from '../protocol/storableText.js';

/** Where a page ended: the time and id of the last item listed. */
export type ListingPosition = readonly [time: number, id: string];

/** The cursor after `position`: opaque to callers (base64url of a small JSON array), stable across stores. */
export function encodeListingCursor(position: ListingPosition): string {
  return Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
}

/** The position a cursor of `encodeListingCursor` holds; undefined when it is not one. */
export function decodeListingCursor(cursor: unknown): ListingPosition | undefined {
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

/** Text a filter may hold: a string both stores can compare (no NUL, no lone surrogate); else why not. */
export function listingText(field: string, value: unknown): { text: string | undefined } | { refused: string } {
  if (value === undefined) return { text: undefined };
  if (typeof value !== 'string') return { refused: `${field} must be a string` };
  const refused = unstorableField(field, value);
  return refused === undefined ? { text: value } : { refused };
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
