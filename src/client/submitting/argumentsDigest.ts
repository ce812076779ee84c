/**
 * The arguments digest kept on every ledger record: two submissions under one idempotency key must carry the same
 * tool arguments, and the digest lets the ledger say so without comparing JSON by hand.
 */
import { createHash } from 'node:crypto';

import type { JsonObject } from '../../protocol/index.js';
import { canonicalJson } from '../../protocol/index.js';

export { canonicalJson };

/** `sha256:` and the hex digest of the canonical JSON of the arguments. */
export function argumentsDigest(args: JsonObject): string {
  return `sha256:${createHash('sha256').update(canonicalJson(args)).digest('hex')}`;
}
