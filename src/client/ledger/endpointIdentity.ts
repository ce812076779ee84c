/**
 * Which server an endpoint string names, for the ledger: the spellings of one HTTP URL that reach
 * the same server get one identity, so one idempotency key makes one record and one server task is followed from one
 * record. The identity is a key, never a URL to connect to: the ledger keeps a spelling that worked for that.
 *
 * Folded together: scheme and host case and the default port (the WHATWG URL parser does these), user info and
 * fragment (never part of which server answers; user info is a credential and stays out of the ledger), trailing
 * slashes of the path, and the loopback names `localhost`, `127.0.0.1` and `[::1]` (one machine, and a server on
 * loopback is reached under whichever the caller typed). Kept apart: another scheme, port, path (case-sensitive),
 * query or host, including other 127.x addresses. Anything that is not an http(s) URL (`stdio:` command lines) is
 * its own identity.
 */
const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]']);

export function endpointIdentity(endpoint: string): string {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return endpoint;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return endpoint;
  const host = LOOPBACK_NAMES.has(url.hostname) ? 'localhost' : url.hostname;
  const port = url.port === '' ? '' : `:${url.port}`;
  const path = url.pathname.replace(/\/+$/, '');
  return `${url.protocol}//${host}${port}${path}${url.search}`;
}
