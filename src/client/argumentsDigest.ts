/**
 * The arguments digest kept on every ledger record: two submissions under one idempotency key must carry the same
 * tool arguments, and the digest lets the ledger say so without comparing JSON by hand.
 */
import { createHash } from 'node:crypto';

import type { JsonObject } from '../protocol/index.js';

/** JSON with object keys sorted at every depth, so equal values give equal text. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item ?? null)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, item]) => item !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** `sha256:` and the hex digest of the canonical JSON of the arguments. */
export function argumentsDigest(args: JsonObject): string {
  return `sha256:${createHash('sha256').update(canonicalJson(args)).digest('hex')}`;
}
