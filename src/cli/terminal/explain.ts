/**
 * Turning what went wrong into one line that says what is wrong and what to do: a server
 * that cannot be reached or is not an MCP server, a ledger that is locked or corrupt, a taskId nobody knows.
 */
import { TaskClientError } from '../../client/errors.js';
import { CliError } from '../cliError.js';
import { EXIT } from '../exitCodes.js';
import { ledgerError } from '../ledgerFile.js';

/** Why `url` could not be used as an MCP server, as one line. */
export function explainConnectError(url: string, failed: unknown): CliError {
  // a ledger that cannot be opened fails the connect before the server is reached: what the CLI's own opening said
  // (its factory threw a CliError), else the client's message
  if (failed instanceof TaskClientError && failed.code.startsWith('ledger-')) {
    return failed.cause instanceof CliError ? failed.cause : new CliError(failed.message);
  }
  // the client's own classification wraps what the transport said, which is what this reads
  const error = failed instanceof TaskClientError && failed.cause !== undefined ? failed.cause : failed;
  const tls = tlsCodeOf(error);
  if (tls !== undefined) {
    // OpenSSL reads a plain HTTP answer as a record of the wrong version
    if (tls === 'ERR_SSL_WRONG_VERSION_NUMBER' && url.startsWith('https:')) {
      return new CliError(
        `${url} does not speak TLS (it answered in plain HTTP): use ${url.replace(/^https:/, 'http:')}, or check the server's TLS setup`,
      );
    }
    return new CliError(
      `the TLS connection to ${url} failed (${tls}): check the URL's scheme and the server's certificate`,
    );
  }
  const errno = errnoOf(error);
  if (errno === 'ECONNREFUSED') {
    return new CliError(`nothing is listening at ${url} (connection refused): start the server, or check the URL`);
  }
  if (errno === 'ENOTFOUND' || errno === 'EAI_AGAIN') {
    return new CliError(`cannot resolve the host of ${url} (${errno}): check the URL`);
  }
  if (errno !== undefined) return new CliError(`cannot reach ${url} (${errno}): check the URL and your network`);
  const network = chain(error).find((e) => e instanceof TypeError && e.message === 'fetch failed');
  if (network) {
    const innermost = chain(network).pop() as Error;
    return new CliError(`cannot reach ${url} (${innermost.message}): check the URL, and that the server is running`);
  }
  const status = httpStatusOf(error);
  if (status !== undefined) {
    if (status === 401 || status === 403) {
      return new CliError(
        `${url} refused the request (HTTP ${status}): give a bearer token it accepts (\`call --token\`, or CLOSEOUT_TOKEN)`,
      );
    }
    return new CliError(
      `${url} answered HTTP ${status}, not MCP: check the URL (a Closeout server's endpoint ends in /mcp)`,
    );
  }
  const message = error instanceof Error ? error.message : String(error);
  return new CliError(`${url} did not answer as an MCP server (${message}): check the URL`);
}

/** A CliError for anything a command can run into, or the error itself when nothing better can be said. */
export function explain(error: unknown, context: { ledgerPath: string; endpoint?: string | undefined }): unknown {
  if (error instanceof CliError) return error;
  const ledger = ledgerError(context.ledgerPath, error);
  if (ledger) return ledger;
  if (error instanceof TaskClientError) {
    const ref = error.taskId ?? error.recordId ?? '';
    switch (error.code) {
      case 'leased-elsewhere':
        return new CliError(
          `${error.message}: another closeout process follows task ${ref}; use that one, or stop it (Ctrl-C detaches) and retry`,
        );
      case 'idempotency-conflict':
        return new CliError(`${error.message}: use another --idempotency-key`);
      case 'unknown-outcome':
        return new CliError(
          `${error.message}: \`closeout resubmit ${ref}\` (or the same call with the same --idempotency-key) sends it again`,
          EXIT.expired,
        );
      case 'expired':
        return new CliError(`${error.message}`, EXIT.expired);
      default:
        return new CliError(error.message);
    }
  }
  if (context.endpoint !== undefined && (errnoOf(error) !== undefined || httpStatusOf(error) !== undefined)) {
    return explainConnectError(context.endpoint, error);
  }
  return error;
}

/** The HTTP status of the SDK's SdkHttpError (by name: commands that never connect do not load the SDK). */
function httpStatusOf(error: unknown): number | undefined {
  const status = (error as { name?: unknown; status?: unknown }).status;
  return error instanceof Error && error.name === 'SdkHttpError' && typeof status === 'number' ? status : undefined;
}

/** The first errno-style code (ECONNREFUSED, ...) in an error's cause chain. */
function errnoOf(error: unknown): string | undefined {
  for (const e of chain(error)) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return code;
    const nested = (e as { errors?: unknown[] }).errors;
    if (Array.isArray(nested)) {
      for (const inner of nested) {
        const found = errnoOf(inner);
        if (found) return found;
      }
    }
  }
  return undefined;
}

/** The first TLS error code (OpenSSL's ERR_SSL_*, Node's ERR_TLS_*, a certificate verdict) in an error's causes. */
function tlsCodeOf(error: unknown): string | undefined {
  for (const e of chain(error)) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^(ERR_SSL_|ERR_TLS_|CERT_|UNABLE_TO_|SELF_SIGNED_|DEPTH_ZERO_)/.test(code))
      return code;
  }
  return undefined;
}

/** An error and its causes, outermost first (the SDK keeps a transport's cause in `data.cause`). */
export function chain(error: unknown): unknown[] {
  const errors: unknown[] = [];
  for (let e = error; e !== undefined && e !== null && errors.length < 8;) {
    errors.push(e);
    const next = e as { cause?: unknown; data?: { cause?: unknown } };
    e = next.cause ?? next.data?.cause;
  }
  return errors;
}
