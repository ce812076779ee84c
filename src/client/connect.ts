/**
 * Connecting a TaskClient in one call: an SDK Client negotiating the protocol version (`'auto'`: 2026-07-28 when the
 * server offers it) and declaring what its input handlers answer (sessionInput.ts: a 2025-era server asks on the
 * session), its transport instrumented for task handles before the first request, and a ledger.
 */
import type { Implementation, StreamableHTTPClientTransportOptions } from '@modelcontextprotocol/client';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { StdioServerParameters } from '@modelcontextprotocol/client/stdio';
import type { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import { connectionError, ledgerFailure } from './errors.js';
import { sessionCapabilities } from './input/sessionInput.js';
import type { Ledger } from './ledger/ledger.js';
import { displayLedgerLocation, isPostgresLocation } from './ledger/ledgerLocation.js';
import { SqliteLedger } from './ledger/sqliteLedger.js';
import type { TaskClientOptions } from './taskClient.js';
import { TaskClient } from './taskClient.js';
import type { HttpFetch } from './transport/httpFetch.js';
import { createHttpFetch } from './transport/httpFetch.js';
import { attachTaskResultCarrier, exitedOnVersionProbe, SessionStdioClientTransport } from './transport/sdkGlue.js';
import { TaskGetFastPath } from './transport/taskGetFastPath.js';
import { retryAfterFetch } from './transport/transportFailure.js';

export const DEFAULT_CLIENT_INFO: Implementation = { name: 'closeout', version: '0.1.0' };

export interface ConnectTaskClientOptions extends Omit<
  TaskClientOptions,
  'client' | 'ledger' | 'endpoint' | 'ownsClient' | 'ownsLedger'
> {
  /**
   * A Ledger; or a string: a `postgres://` (or `postgresql://`) connection string opens a PostgresLedger, shared by
   * every worker of a fleet (migrated on open), anything else is the path of the SQLite ledger file (created 0600 when
   * missing); or a function that opens one. Over HTTP the ledger opens first, whether the server answers or not; over
   * stdio, once the server answered.
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
  /**
   * When the server cannot be reached at start (refused, reset, timed out, HTTP 5xx): `true` (the default) returns the
   * client anyway, so a process can start while its server is down: `resumeAll()` reports and follows what the ledger
   * holds, its polls backing off as transport failures until the server answers, and a call connects first, refused
   * with TaskClientError `unreachable` while the server is still down. `false` throws that error at once.
   */
  connectLater?: boolean | undefined;
  /**
   * The most the client reads of one answer, or of one event of an SSE stream (push included), on its own pool: past
   * it the answer is dropped and recorded as a transport failure, and the task is followed on (polled, backing off).
   * Default 32 MiB (DEFAULT_MAX_ANSWER_BYTES). With a `fetch` of your own, that fetch decides.
   */
  maxAnswerBytes?: number | undefined;
}

/**
 * Connect to a Streamable HTTP server. Fails (TaskClientError) only on what waiting would not mend: a refused
 * credential (`unauthorized`), an endpoint that is no MCP server or shares no protocol revision (`protocol`), a ledger
 * that cannot be opened (`ledger-busy`, `ledger-unavailable`); an unreachable server is connected to later
 * (`connectLater`).
 */
export async function connectHttpTaskClient(url: string | URL, options: ConnectHttpOptions): Promise<TaskClient> {
  const target = new URL(url);
  const endpoint = options.endpoint ?? target.href;
  // one pool and poll fast path for the client's life; each connection attempt gets a transport of its own (the SDK
  // does not start one twice), which leaves the pool open: it is closed with the client
  const pool = options.fetch ? undefined : createHttpFetch({}, options.maxAnswerBytes);
  const fastPath =
    pool && options.pollFastPath !== false ? new TaskGetFastPath(pool, target, options.requestInit) : undefined;
  const closePool = async () => {
    fastPath?.close();
    await pool?.close();
  };
  // the credential a record is created under, as a keyed fingerprint (TaskClientOptions.credential)
  const credential = options.credential ?? new Headers(options.requestInit?.headers).get('authorization') ?? undefined;
  const {
    ledger: ledgerOption,
    clientInfo,
    endpoint: _endpoint,
    connectLater,
    maxAnswerBytes: _max,
    ...rest
  } = options;
  const client = new Client(clientInfo ?? DEFAULT_CLIENT_INFO, {
    versionNegotiation: { mode: 'auto' },
    capabilities: sessionCapabilities(options.inputHandlers),
  });
  const connect = async () => {
    const transport = new StreamableHTTPClientTransport(target, httpTransportOptions(options, pool, fastPath));
    attachTaskResultCarrier(transport);
    await client.connect(transport);
  };
  // with connectLater: false the server is asked first, so a server that cannot be used leaves no ledger behind
  const connectFirst = connectLater === false;
  if (connectFirst) {
    try {
      await connect();
    } catch (error) {
      await closePool();
      throw connectionError(endpoint, error);
    }
  }
  let ledger: Ledger;
  try {
    ledger = await openLedgerOption(ledgerOption);
  } catch (error) {
    await client.close().catch(() => undefined);
    await closePool();
    throw error;
  }
  const ownsLedger = typeof ledgerOption === 'string';
  if (!connectFirst) {
    try {
      await connect();
    } catch (error) {
      const failure = connectionError(endpoint, error);
      if (failure.code !== 'unreachable') {
        if (ownsLedger) await ledger.dispose();
        await closePool();
        throw failure;
      }
    }
  }
  return new TaskClient({
    ...rest,
    credential,
    ...(fastPath && { taskGetFastPath: fastPath }),
    client,
    ledger,
    endpoint,
    ownsClient: true,
    ownsLedger,
    connect,
    onClosed: closePool,
  });
}

/**
 * @internal A transport like the one `connectHttpTaskClient` connects with, owning its pool. Without a fetch of the
 * caller's it gets an undici pool of its own, closed when it closes, and polls take the fast path on it
 * (taskGetFastPath.ts); a caller's fetch sees every request, so it gets them all.
 */
export function httpTaskTransport(
  target: URL,
  options: Pick<ConnectHttpOptions, 'fetch' | 'requestInit' | 'pollFastPath' | 'maxAnswerBytes'>,
): { transport: StreamableHTTPClientTransport; pool?: HttpFetch; fastPath?: TaskGetFastPath } {
  const pool = options.fetch ? undefined : createHttpFetch({}, options.maxAnswerBytes);
  const fastPath =
    pool && options.pollFastPath !== false ? new TaskGetFastPath(pool, target, options.requestInit) : undefined;
  const transportOptions = httpTransportOptions(options, pool, fastPath);
  if (!pool) return { transport: new StreamableHTTPClientTransport(target, transportOptions) };
  return {
    transport: new PooledHttpClientTransport(target, transportOptions, pool, fastPath),
    pool,
    ...(fastPath && { fastPath }),
  };
}

/** The transport's options: the caller's fetch, or the pool's (through the fast path's observer); Retry-After kept. */
function httpTransportOptions(
  options: Pick<ConnectHttpOptions, 'fetch' | 'requestInit'>,
  pool: HttpFetch | undefined,
  fastPath: TaskGetFastPath | undefined,
): StreamableHTTPClientTransportOptions {
  return {
    fetch: retryAfterFetch(options.fetch ?? (fastPath ? fastPath.observe(pool!.fetch) : pool!.fetch)),
    ...(options.requestInit ? { requestInit: options.requestInit } : {}),
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
    // the server exited under the client: spawn it again on the same SDK client
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
  const client = new Client(clientInfo ?? DEFAULT_CLIENT_INFO, {
    versionNegotiation: { mode: versionNegotiation },
    capabilities: sessionCapabilities(options.inputHandlers),
  });
  attachTaskResultCarrier(transport);
  await client.connect(transport);
  const ownsLedger = typeof ledgerOption === 'string';
  let ledger: Ledger;
  try {
    ledger = await openLedgerOption(ledgerOption);
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

/**
 * The ledger the `ledger` option gives: itself, what its function opens, or the ledger its string names. One that
 * cannot be opened is a TaskClientError (`ledger-busy`, `ledger-unavailable`) saying why.
 */
async function openLedgerOption(option: ConnectTaskClientOptions['ledger']): Promise<Ledger> {
  try {
    if (typeof option === 'string') return await openLedgerLocation(option);
    return typeof option === 'function' ? await option() : option;
  } catch (error) {
    const location = typeof option === 'string' ? displayLedgerLocation(option) : undefined;
    throw ledgerFailure(location, error, 'no client was made');
  }
}

/**
 * @internal The ledger a string names: a PostgreSQL database for `postgres://` URLs (loaded only then), else a SQLite
 * file (created 0600 when missing, in a folder that must exist).
 */
export async function openLedgerLocation(location: string): Promise<Ledger> {
  if (!isPostgresLocation(location)) return new SqliteLedger(location);
  const { PostgresLedger } = await import('./ledger/postgresLedger.js');
  return PostgresLedger.open(location);
}
