/**
 * LISTEN on one PostgreSQL channel over a connection of its own, outside any pool, reconnecting on its own with a
 * doubling delay after a drop (docs/DESIGN.md, "The task's life on the server", 8: LISTEN/NOTIFY for speed, the lease
 * loop as the fallback). A notification sent while the connection is down is lost: whoever listens needs a fallback.
 */
import type pg from 'pg';

import { loadPg } from '../../shared/postgres/driver.js';

const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

export interface PostgresListenerOptions {
  /** How to connect; keepAlive is turned on so a peer that vanished without closing is noticed. */
  connection: pg.ClientConfig;
  /** The channel name (an SQL identifier, written into `LISTEN` as it is). */
  channel: string;
  /** Every payload that arrives on the channel, as the connection delivers it. */
  onPayload: (payload: string | undefined) => void;
  /** Told about a dropped connection and a failed reconnect (each wrapped by `wrap`). */
  onError: (error: Error) => void;
  /** Turns a failure into the Error reported, saying what failed (`op`). */
  wrap: (op: string, error: unknown) => Error;
}

export class PostgresListener {
  private readonly config: pg.ClientConfig;
  private client: pg.Client | undefined;
  /** Resolves once LISTEN is active; replaced while reconnecting after a drop. */
  private ready: Promise<void> | undefined;
  private wakeReconnect: (() => void) | undefined;
  private closed = false;

  constructor(private readonly options: PostgresListenerOptions) {
    this.config = { ...options.connection, keepAlive: true, application_name: `${options.channel} listener` };
  }

  /** Resolves once the LISTEN connection is up, starting it if needed; after a drop it reconnects on its own. */
  listening(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('PostgreSQL task store: closed'));
    this.ready ??= this.connect().catch((error: unknown) => {
      this.ready = undefined; // the next call tries again
      throw this.options.wrap('listen', error);
    });
    return this.ready;
  }

  /** Ends the connection and any reconnect loop; for good. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeReconnect?.();
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => {});
  }

  private async connect(): Promise<void> {
    const client = new (loadPg().Client)(this.config);
    client.on('notification', (message) => this.options.onPayload(message.payload));
    // an 'error' (server gone, connection reset) is followed by 'end'; both mean: reconnect
    client.on('error', (error) => this.lost(client, error));
    client.on('end', () => this.lost(client, new Error('LISTEN connection ended')));
    try {
      await client.connect();
      await client.query(`LISTEN ${this.options.channel}`);
    } catch (error) {
      await client.end().catch(() => {});
      throw error;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
  }

  private lost(client: pg.Client, error: Error): void {
    if (this.client !== client) return; // already handled, or closing
    this.client = undefined;
    client.end().catch(() => {});
    if (this.closed) return;
    this.options.onError(this.options.wrap('LISTEN connection lost, reconnecting', error));
    this.ready = this.reconnect();
  }

  /** Retries with a doubling delay until connected or closed; resolves then. */
  private async reconnect(): Promise<void> {
    for (let delay = RECONNECT_MIN_MS; !this.closed; delay = Math.min(delay * 2, RECONNECT_MAX_MS)) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        timer.unref();
        this.wakeReconnect = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeReconnect = undefined;
      if (this.closed) break;
      try {
        await this.connect();
        return;
      } catch (error) {
        this.options.onError(this.options.wrap('LISTEN reconnect failed', error));
      }
    }
  }
}
