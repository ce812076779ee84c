/**
 * What the parts of a TaskClient share (docs/DESIGN.md, "The task's life on the client"): its options and clocks, the
 * live handles, the per-record chain that keeps one record's requests from overlapping, the ledger look-ups and the
 * events. Submission (`submission.ts`), following (`following.ts`) and the front (`taskClient.ts`) all stand on it.
 */
import type { Client } from '@modelcontextprotocol/client';

import { newLeaseHolder } from '../../shared/lease/leaseHolder.js';
import { TaskClientError } from '../errors.js';
import type { Ledger, RecordedError, TaskRecord } from '../ledger/ledger.js';
import { credentialFingerprint } from '../ledger/ledgerKeys.js';
import type { TaskClientEvent, TaskClientOptions } from './clientOptions.js';
import { LiveHandles } from './liveHandles.js';
import type { SchedulerClock } from './scheduler.js';
import { STEADY_CLOCK, SYSTEM_CLOCK } from './scheduler.js';
import { ClientTelemetry } from './telemetry.js';

const DEFAULT_LEASE_MS = 30_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
export const DEFAULT_STORAGE_PATIENCE_MS = 600_000;

export class ClientCore {
  readonly endpoint: string;
  readonly leaseHolder: string;
  readonly ledger: Ledger;
  readonly client: Client;
  readonly clock: SchedulerClock;
  /** Scheduling and task ages: never steps with the wall clock (the `clock` option replaces both, for tests). */
  readonly steady: SchedulerClock;
  readonly random: () => number;
  readonly leaseMs: number;
  readonly requestTimeoutMs: number;
  readonly ttlGraceMs: number;
  readonly storagePatienceMs: number;
  /** The records this process follows, with their handles (liveHandles.ts). */
  readonly live = new LiveHandles();
  /** Per-record chain: polls, refreshes and cancels of one record never overlap. */
  private readonly serial = new Map<string, Promise<unknown>>();
  closed = false;
  /** A connection attempt in flight (`ensureConnected`), shared by every request that waits for it. */
  private connecting: Promise<void> | undefined;
  private ledgerKeys: Promise<{ secret: Uint8Array; credential: string }> | undefined;

  /** @internal spans and metrics of this client (telemetry.ts) */
  readonly telemetry: ClientTelemetry;

  constructor(readonly options: TaskClientOptions) {
    this.client = options.client;
    this.ledger = options.ledger;
    this.endpoint = options.endpoint;
    this.leaseHolder = options.leaseHolder ?? newLeaseHolder();
    // times the ledger holds are on its clock: a fleet's workers on many hosts share one (Ledger.now)
    this.clock = options.clock ?? { ...SYSTEM_CLOCK, now: () => options.ledger.now() };
    this.steady = options.clock ?? STEADY_CLOCK;
    this.random = options.random ?? Math.random;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.ttlGraceMs = options.ttlGraceMs ?? 300_000;
    this.storagePatienceMs = options.storagePatienceMs ?? DEFAULT_STORAGE_PATIENCE_MS;
    this.telemetry = new ClientTelemetry(options.telemetry ?? {}, options.ledger, options.endpoint);
  }

  /**
   * Resolves once the SDK client is connected. A client made while its server could not be reached
   * (`connectHttpTaskClient`) connects on the first request that needs the server, one attempt at a time; a failed
   * attempt throws, and the caller records it as it records any transport failure (a poll backs off and tries again;
   * a tools/call is refused before anything is recorded or sent).
   */
  async ensureConnected(): Promise<void> {
    const connect = this.options.connect;
    if (!connect || this.client.transport) return;
    this.assertOpen();
    this.connecting ??= connect().finally(() => (this.connecting = undefined));
    await this.connecting;
  }

  assertOpen(): void {
    if (this.closed) throw new TaskClientError('closed', 'the TaskClient is closed');
  }

  /** The ledger's secret and this client's credential fingerprint, read once. */
  keys(): Promise<{ secret: Uint8Array; credential: string }> {
    this.ledgerKeys ??= this.ledger.secret().then((secret) => ({
      secret,
      credential: credentialFingerprint(secret, this.options.credential),
    }));
    return this.ledgerKeys;
  }

  /** Whether this client calls under another credential than the one `record` was created under. */
  async underOtherCredential(record: TaskRecord): Promise<boolean> {
    // records older than ledger schema 2 carry no fingerprint: -32602 keeps meaning what it meant for them
    if (record.credential === undefined) return false;
    return record.credential !== (await this.keys()).credential;
  }

  async resolve(ref: string): Promise<TaskRecord> {
    const record = await this.find(ref);
    if (!record) throw new TaskClientError('not-found', `no ledger record for ${ref} at ${this.endpoint}`);
    return record;
  }

  /** The record of an id this process holds (no lookup by taskId or key). */
  async reload(recordId: string): Promise<TaskRecord> {
    const record = await this.ledger.get(recordId);
    if (!record) throw new TaskClientError('not-found', `no ledger record ${recordId} at ${this.endpoint}`);
    return record;
  }

  /** The ledger record for a taskId, record id or idempotency key. */
  async find(ref: string): Promise<TaskRecord | undefined> {
    return (
      (await this.ledger.findByTaskId(this.endpoint, ref)) ??
      (await this.ledger.get(ref)) ??
      (await this.ledger.findByIdempotencyKey(this.endpoint, ref))
    );
  }

  serialized<T>(recordId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.serial.get(recordId) ?? Promise.resolve();
    const next = previous.then(work, work);
    const tail = next.catch(() => undefined);
    this.serial.set(recordId, tail);
    void tail.then(() => {
      if (this.serial.get(recordId) === tail) this.serial.delete(recordId);
    });
    return next;
  }

  /** Resolves once every record's chain in flight now has settled. */
  async serialIdle(): Promise<void> {
    await Promise.allSettled([...this.serial.values()]);
  }

  async recordError(recordId: string, error: RecordedError): Promise<void> {
    await this.ledger.recordError(recordId, error).catch(() => undefined);
    this.emit({ type: 'error', recordId, error });
    // a failed input handler leaves the task waiting: the handle's listeners hear it, with the failure as lastError
    const handle = error.kind === 'input' ? this.live.get(recordId) : undefined;
    const record = handle && (await this.ledger.get(recordId).catch(() => undefined));
    if (handle && record) handle.observe(record);
  }

  async emitClosed(recordId: string): Promise<TaskRecord | undefined> {
    const record = await this.ledger.get(recordId);
    if (record) this.emit({ type: 'closed', record });
    return record;
  }

  emit(event: TaskClientEvent): void {
    if (event.type === 'closed') this.telemetry.closedOut(event.record, this.clock.now());
    try {
      this.options.onEvent?.(event);
    } catch {
      // an observer's bug must not stop the client
    }
  }
}

export function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
