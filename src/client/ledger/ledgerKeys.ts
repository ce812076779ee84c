/**
 * What the client derives from its ledger's secret (docs/DESIGN.md, rule 5): a fingerprint of the credential a record
 * was created under, so an answer under another credential is told apart without storing the credential; and the
 * idempotency key sent on the wire, so a business id used as a key (`release-42`) cannot be guessed, or replayed to
 * get someone's task, by anyone who does not hold the ledger.
 */
import { createHmac } from 'node:crypto';

/** The fingerprint of a credential (a bearer token, or anything that identifies the caller); `undefined`: none. */
export function credentialFingerprint(secret: Uint8Array, credential: string | undefined): string {
  const mac = createHmac('sha256', secret)
    .update('closeout credential\0')
    .update(credential ?? '\0none');
  return `hmac-sha256:${mac.digest('base64url')}`;
}

/** The idempotency key sent to `endpoint` for the caller's `key`: the same for the same ledger, endpoint and key. */
export function wireIdempotencyKey(secret: Uint8Array, endpoint: string, key: string): string {
  const mac = createHmac('sha256', secret).update('closeout idempotency key\0').update(endpoint).update('\0');
  return `ck1.${mac.update(key).digest('base64url')}`;
}
