/**
 * Connecting a TaskClient in one call: an SDK Client negotiating the protocol version (`'auto'`: 2026-07-28 when the
 * server offers it), its transport instrumented for task handles before the first request, and a ledger.
 */
import type { Implementation, StreamableHTTPClientTransportOptions } from '@modelcontextprotocol/client';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { StdioServerParameters } from '@modelcontextprotocol/client/stdio';
import type { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import type { HttpFetch } from './httpFetch.js';
import { createHttpFetch } from './httpFetch.js';
import type { Ledger } from './ledger/ledger.js';
import { isPostgresLocation } from './ledger/ledgerLocation.js';
import { SqliteLedger } from './ledger/sqliteLedger.js';
import { attachTaskResultCarrier, exitedOnVersionProbe, SessionStdioClientTransport } from './sdkGlue.js';
import type { TaskClientOptions } from './taskClient.js';
import { TaskClient } from './taskClient.js';
import { TaskGetFastPath } from './taskGetFastPath.js';
import { retryAfterFetch } from './transportFailure.js';

export const DEFAULT_CLIENT_INFO: Implementation = { name: 'closeout', version: '0.1.0' };

export interface ConnectTaskClientOptions extends Omit<
  TaskClientOptions,
  'client' | 'ledger' | 'endpoint' | 'ownsClient' | 'ownsLedger'
> {
  /**
   * A Ledger; or a string: a `postgres://` (or `postgresql://`) connection string opens a PostgresLedger, shared by
   * every worker of a fleet (migrated on open), anything else is the path of the SQLite ledger file (created 0600 when
   * missing); or a function that opens one. A string or a function is used only once the server has answered, so a
   * server that cannot be reached leaves no ledger behind.
   */
  ledger: Ledger | string | (() => Ledger | Promise<Ledger>);
  clientInfo?: Implementation | undefined;
  /** Override the endpoint identity (default: the URL, or `stdio:` and the command line). */
  endpoint?: string | undefined;
}

export interface ConnectHttpOptions extends ConnectTaskClientOptions {
  /**
   * The fetch the transport uses (default: an undici-based fetch on a pool of its own, closed with the client); it is
   * wrapped so 429/503 keep their Retry-After.
   */
  fetch?: typeof fetch | undefined;
  requestInit?: RequestInit | undefined;
  /**
   * Send ordinary polls on the transport's pool directly, in the SDK's own bytes (taskGetFastPath.ts). Default true;
   * never with a `fetch` of the caller's.
   */
  pollFastPath?: boolean | undefined;
}

/** Connect to a Streamable HTTP server. */
export async function connectHttpTaskClient(url: string | URL, options: ConnectHttpOptions): Promise<TaskClient> {
  const target = new URL(url);
  const { transport, pool, fastPath } = httpTaskTransport(target, options);
  // the credential a record is created under, as a keyed fingerprint (TaskClientOptions.credential)
  const credential = options.credential ?? new Headers(options.requestInit?.headers).get('authorization') ?? undefined;
  try {
    return await connectWith(transport, options.endpoint ?? target.href, {
      ...options,
      credential,
      ...(fastPath && { taskGetFastPath: fastPath }),
    });
  } catch (error) {
    await pool?.close();
    throw error;
  }
}

/**
 * @internal The transport `connectHttpTaskClient` connects with. Without a fetch of the caller's it gets an undici
 * pool of its own, closed when it closes, and polls take the fast path on it (taskGetFastPath.ts); a caller's fetch
 * sees every request, so it gets them all.
 */
export function httpTaskTransport(
  target: URL,
  options: Pick<ConnectHttpOptions, 'fetch' | 'requestInit' | 'pollFastPath'>,
): { transport: StreamableHTTPClientTransport; pool?: HttpFetch; fastPath?: TaskGetFastPath } {
  const pool = options.fetch ? undefined : createHttpFetch();
  const fastPath =
    pool && options.pollFastPath !== false ? new TaskGetFastPath(pool, target, options.requestInit) : undefined;
  const transportOptions: StreamableHTTPClientTransportOptions = {
    fetch: retryAfterFetch(options.fetch ?? (fastPath ? fastPath.observe(pool!.fetch) : pool!.fetch)),
    ...(options.requestInit ? { requestInit: options.requestInit } : {}),
  };
  if (!pool) return { transport: new StreamableHTTPClientTransport(target, transportOptions) };
  return {
    transport: new PooledHttpClientTransport(target, transportOptions, pool, fastPath),
    pool,
    ...(fastPath && { fastPath }),
  };
}

/**
 * A Streamable HTTP transport that closes its fetch's connection pool when it closes: the SDK client closes its
 * transport on `close()` (the TaskClient's, when it owns the client) and when connecting fails, and aborts every
 * request in flight first, so the pool is free to close.
 */
class PooledHttpClientTransport extends StreamableHTTPClientTransport {
  private readonly pool: HttpFetch;
  private readonly fastPath: TaskGetFastPath | undefined;

  constructor(
    url: URL,
    options: StreamableHTTPClientTransportOptions,
    pool: HttpFetch,
    fastPath: TaskGetFastPath | undefined,
  ) {
    super(url, options);
    this.pool = pool;
    this.fastPath = fastPath;
  }

  override async close(): Promise<void> {
    // the fast path's polls in flight are aborted as the SDK aborts its own, so the pool is free to close
    this.fastPath?.close();
    try {
      await super.close();
    } finally {
      await this.pool.close();
    }
  }
}

/** Spawn a stdio server and connect to it. */
export async function connectStdioTaskClient(
  server: StdioServerParameters,
  options: ConnectTaskClientOptions,
): Promise<TaskClient> {
  const endpoint = options.endpoint ?? ['stdio:' + server.command, ...(server.args ?? [])].join(' ');
  const reconnect = async (client: Client) => {
    // the server exited under the client: spawn it again on the same SDK client (issue 13 item 10)
    const respawned = new SessionStdioClientTransport(server);
    attachTaskResultCarrier(respawned);
    await client.connect(respawned);
  };
  try {
    return await connectWith(new SessionStdioClientTransport(server), endpoint, options, reconnect);
  } catch (error) {
    if (!exitedOnVersionProbe(error)) throw error;
    // a 2025-era server that allows nothing before `initialize` died of the probe; it has no Tasks, so it had no
    // orphaned tasks to take over: spawn it once more and skip the probe
    return connectWith(new SessionStdioClientTransport(server), endpoint, options, reconnect, 'legacy');
  }
}

async function connectWith(
  transport: StreamableHTTPClientTransport | StdioClientTransport,
  endpoint: string,
  options: ConnectTaskClientOptions & Pick<TaskClientOptions, 'taskGetFastPath'>,
  reconnect?: (client: Client) => Promise<void>,
  versionNegotiation: 'auto' | 'legacy' = 'auto',
): Promise<TaskClient> {
  const { ledger: ledgerOption, clientInfo, endpoint: _endpoint, ...rest } = options;
  const client = new Client(clientInfo ?? DEFAULT_CLIENT_INFO, { versionNegotiation: { mode: versionNegotiation } });
  attachTaskResultCarrier(transport);
  await client.connect(transport);
  const ownsLedger = typeof ledgerOption === 'string';
  let ledger: Ledger;
  try {
    ledger =
      typeof ledgerOption === 'string'
        ? await openLedgerLocation(ledgerOption)
        : typeof ledgerOption === 'function'
          ? await ledgerOption()
          : ledgerOption;
  } catch (error) {
    await client.close();
    throw error;
  }
  return new TaskClient({
    ...rest,
    client,
    ledger,
    endpoint,
    ownsClient: true,
    ownsLedger,
    ...(reconnect ? { reconnect: () => reconnect(client) } : {}),
  });
}

/** The ledger a string names: a PostgreSQL database for `postgres://` URLs (loaded only then), else a SQLite file. */
async function openLedgerLocation(location: string): Promise<Ledger> {
  if (!isPostgresLocation(location)) return new SqliteLedger(location);
  const { PostgresLedger } = await import('./ledger/postgresLedger.js');
  return PostgresLedger.open(location);
}
