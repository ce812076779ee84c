/**
 * One command's use of the client half: the ledger, and one TaskClient per server it talks to, all sharing that
 * ledger. Records carry the endpoint they belong to, so commands that take only a taskId find their server there.
 */
import type { TaskClient, TaskClientEvent, TaskInputHandlers } from '../client/index.js';
import type { Ledger, TaskRecord } from '../client/ledger/index.js';
import { displayLedgerLocation, isPostgresLocation } from '../client/ledger/ledgerLocation.js';
import { CliError } from './cliError.js';
import { openLedger, openLedgerFile } from './ledgerFile.js';
import { isTaskIdPrefix, noSuchTask } from './taskIdPrefix.js';
import { explainConnectError } from './terminal/explain.js';

/** A bearer token for the servers the CLI talks to (the ledger never stores it). */
export const TOKEN_ENV = 'CLOSEOUT_TOKEN';

/**
 * The server (URL or origin) `CLOSEOUT_TOKEN` is for, when the command does not name it: the token goes there and
 * nowhere else. Without it the token goes only to the server named on the command line (`call URL`) and to servers
 * whose ledger records were created under that same token (docs/DESIGN.md, rule 5).
 */
export const TOKEN_SERVER_ENV = 'CLOSEOUT_TOKEN_SERVER';

export interface SessionOptions {
  /** The ledger file's path, or a PostgreSQL ledger's connection string (never shown as it is). */
  ledgerPath: string;
  /** Input handlers for a server's tasks (elicitation prompts or preset answers). */
  inputHandlers?: ((endpoint: string) => TaskInputHandlers) | undefined;
  onEvent?: ((event: TaskClientEvent, endpoint: string) => void) | undefined;
  /** A bearer token for the one server a command names (`call --token`); else CLOSEOUT_TOKEN. Never stored. */
  token?: string | undefined;
  /** The server named on the command line: `CLOSEOUT_TOKEN` is given for it. */
  namedServer?: string | undefined;
}

export class ClientSession {
  readonly ledgerPath: string;
  private readonly clients = new Map<string, TaskClient>();
  private opened: Ledger | undefined;
  private closed = false;

  private constructor(
    private readonly options: SessionOptions,
    ledger?: Ledger,
  ) {
    this.ledgerPath = options.ledgerPath;
    this.opened = ledger;
  }

  /**
   * A session whose ledger is opened (and created when missing) on first use: for `call`, once the server has
   * answered, so bad input leaves no ledger behind.
   */
  static open(options: SessionOptions): ClientSession {
    return new ClientSession(options);
  }

  /** Open an existing ledger only; undefined when there is none (nothing recorded yet). */
  static async openExisting(options: SessionOptions): Promise<ClientSession | undefined> {
    const ledger = await openLedger(options.ledgerPath, { mustExist: true });
    return ledger ? new ClientSession(options, ledger) : undefined;
  }

  /** The ledger, opened now if it was not yet (a PostgreSQL ledger is opened by `openedLedger()` first). */
  get ledger(): Ledger {
    if (this.opened) return this.opened;
    if (isPostgresLocation(this.ledgerPath)) {
      throw new Error(`the ledger ${displayLedgerLocation(this.ledgerPath)} is not open yet`);
    }
    this.opened = openLedgerFile(this.ledgerPath) as Ledger;
    return this.opened;
  }

  /** The ledger, opened now (and created or migrated) if it was not yet. */
  async openedLedger(): Promise<Ledger> {
    this.opened ??= (await openLedger(this.ledgerPath)) as Ledger;
    return this.opened;
  }

  /** The TaskClient for `endpoint`, connected on first use. */
  async client(endpoint: string): Promise<TaskClient> {
    const existing = this.clients.get(endpoint);
    if (existing) return existing;
    if (!/^https?:\/\//.test(endpoint)) {
      throw new CliError(`the ledger record's server ${endpoint} is not an HTTP endpoint: the CLI only speaks HTTP`);
    }
    // a token given on the command line is for the one server the command names; else CLOSEOUT_TOKEN, kept to its server
    const token = this.options.token ?? (await this.tokenFor(endpoint));
    // the SDK is loaded only by commands that talk to a server
    const { connectHttpTaskClient } = await import('../client/connect.js');
    let client: TaskClient;
    try {
      client = await connectHttpTaskClient(endpoint, {
        ledger: () => this.openedLedger(),
        endpoint,
        // a command tells the user at once that the server is down, with what to do
        connectLater: false,
        ...(token ? { requestInit: { headers: { authorization: `Bearer ${token}` } } } : {}),
        ...(this.options.inputHandlers ? { inputHandlers: this.options.inputHandlers(endpoint) } : {}),
        onEvent: (event) => this.options.onEvent?.(event, endpoint),
      });
    } catch (error) {
      if (error instanceof CliError) throw error; // the ledger could not be opened
      throw explainConnectError(endpoint, error);
    }
    this.clients.set(endpoint, client);
    return client;
  }

  /**
   * `CLOSEOUT_TOKEN` when it belongs to `endpoint`, else undefined: a token goes only to the server it was given for
   * (CLOSEOUT_TOKEN_SERVER, the server the command names, or one that already holds records created under it), never
   * to every server with an open record.
   */
  private async tokenFor(endpoint: string): Promise<string | undefined> {
    const token = process.env[TOKEN_ENV];
    if (!token) return undefined;
    const given = process.env[TOKEN_SERVER_ENV] || this.options.namedServer;
    if (given) return sameServer(given, endpoint) ? token : undefined;
    if (!this.opened) return undefined;
    const { credentialFingerprint } = await import('../client/ledger/ledgerKeys.js');
    const fingerprint = credentialFingerprint(await this.ledger.secret(), `Bearer ${token}`);
    const records = await this.ledger.list({ endpoint });
    return records.some((record) => record.credential === fingerprint) ? token : undefined;
  }

  /** A record by taskId, record id or idempotency key, over every server in the ledger. */
  async find(ref: string): Promise<TaskRecord | undefined> {
    const direct = await this.ledger.get(ref);
    if (direct) return direct;
    const all = await this.ledger.list();
    return (
      all.find((r) => r.taskId === ref) ??
      all.find((r) => r.idempotencyKey === ref && r.supersededBy === undefined) ??
      // a unique prefix of a taskId, as people copy them
      unique(all.filter((r) => isTaskIdPrefix(ref) && r.taskId?.startsWith(ref)))
    );
  }

  /** Like find, but an unknown reference is bad input, and so is a prefix too short or shared by several tasks. */
  async require(ref: string): Promise<TaskRecord> {
    const record = await this.find(ref);
    if (record) return record;
    const starting = (await this.ledger.list()).filter((r) => r.taskId?.startsWith(ref)).length;
    throw unknownTask(ref, this.ledgerPath, starting);
  }

  /** Close every client: leases are handed back, and answers being sent are sent (or their failure recorded). */
  async closeClients(): Promise<void> {
    for (const client of this.clients.values()) await client.close().catch(() => undefined);
    this.clients.clear();
  }

  /** Close every client, then the ledger. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.closeClients();
    await this.opened?.dispose();
  }
}

/** No record for `ref` in the ledger (`starting`: how many taskIds start with it). */
export function unknownTask(ref: string, ledgerPath: string, starting = 0): CliError {
  return noSuchTask(ref, starting, `the ledger ${displayLedgerLocation(ledgerPath)}`, 'closeout ls --all');
}

function unique<T>(items: T[]): T | undefined {
  return items.length === 1 ? items[0] : undefined;
}

/** Whether two server URLs (or origins) name the same server: a token is given for an origin. */
function sameServer(given: string, endpoint: string): boolean {
  try {
    return new URL(given).origin === new URL(endpoint).origin;
  } catch {
    return false;
  }
}
