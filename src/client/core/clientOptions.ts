/**
 * The options and events of a TaskClient (taskClient.ts), in a leaf module: the parts the client's files share import
 * them from here, so none of them imports the TaskClient itself.
 */
import type { Client, ClientCapabilities } from '@modelcontextprotocol/client';

import type { TaskInputHandlers } from '../input/inputRouter.js';
import type { Ledger, RecordedError, TaskRecord } from '../ledger/ledger.js';
import type { TaskHandle } from '../taskHandle.js';
import type { TaskGetFastPath } from '../transport/taskGetFastPath.js';
import type { PushOptions, PushState } from './pushOptions.js';
import type { PollPolicy, SchedulerClock } from './scheduler.js';
import type { ClientTelemetryOptions } from './telemetry.js';

export interface TaskClientOptions {
  /** An SDK client, connected or not; its transport is instrumented by `sdkGlue` when the TaskClient uses it. */
  client: Client;
  ledger: Ledger;
  /** Which server this is (its URL, or `stdio:` and the command line): ledger records are scoped by it. */
  endpoint: string;
  /**
   * Who answers input: a task's `inputRequests` and MRTR rounds (stored in the ledger first, never asked twice), and a
   * 2025-era server's `elicitation/create`, `sampling/createMessage` and `roots/list` sent on the session during a call
   * (sessionInput.ts; the SDK client must declare those capabilities, as the connect functions do).
   */
  inputHandlers?: TaskInputHandlers | undefined;
  /** Extra per-request client capabilities sent with task requests (the handlers' ones are derived). */
  capabilities?: ClientCapabilities | undefined;
  pollPolicy?: Partial<PollPolicy> | undefined;
  /**
   * For tests: one clock for scheduling and for the ledger's times. Default: scheduling on STEADY_CLOCK, ledger times
   * and leases on the ledger's clock (`Ledger.now`).
   */
  clock?: SchedulerClock | undefined;
  random?: (() => number) | undefined;
  /** How long a lease on a record lasts without renewal. Default 30 s; renewed every third of it. */
  leaseMs?: number | undefined;
  /**
   * Share the ledger's open records with the other workers of a fleet: every this many ms, take up the
   * endpoint's open records whose lease is free or ran out (a dead worker's) and follow them; their close-outs arrive
   * as `closed` events. Default: off (records are taken up by `resumeAll()` and `attach()` only).
   */
  takeOverEveryMs?: number | undefined;
  /** This process's lease holder id. Default: host, pid and a random suffix. */
  leaseHolder?: string | undefined;
  /** Timeout of each tools/call and tasks/* request. Default 60 s. */
  requestTimeoutMs?: number | undefined;
  /** A stored input answer the server still lists is sent again after this long. Default 5 s. */
  inputResendAfterMs?: number | undefined;
  /**
   * How long something that arrived (a taskId, an input answer) is retried into a busy or failing ledger before the
   * client gives up on recording it (docs/DESIGN.md rule 10). Default 10 min.
   */
  storagePatienceMs?: number | undefined;
  /**
   * Once this client has itself seen a task open for its `ttlMs`, how much longer an unreachable server is retried
   * before the record expires. Default 5 min.
   */
  ttlGraceMs?: number | undefined;
  /**
   * What identifies the caller to this server (e.g. its bearer token); only a fingerprint keyed with the ledger's
   * secret is stored, on every record this client creates: a -32602 under another credential is not taken as expiry.
   * `connectHttpTaskClient` takes it from the `authorization` header of `requestInit` when not given.
   */
  credential?: string | undefined;
  /** Close the SDK client too when this TaskClient closes. */
  ownsClient?: boolean | undefined;
  /** Dispose of the ledger too when this TaskClient closes. */
  ownsLedger?: boolean | undefined;
  /**
   * Connect the SDK client again after its connection closed under it (a stdio server that exited):
   * connectStdioTaskClient spawns the server again. Without it, a closed connection is surfaced: the handles settle
   * as `disconnected` and their leases are handed back for a later `resumeAll()`.
   */
  reconnect?: (() => Promise<void>) | undefined;
  /**
   * @internal Connect the SDK client when it is not connected yet: `connectHttpTaskClient` passes one when the server
   * could not be reached at start, and every request that needs the server connects first (ClientCore.ensureConnected).
   */
  connect?: (() => Promise<void>) | undefined;
  /** @internal Called last in close(): what the connect function's transports share (an HTTP connection pool). */
  onClosed?: (() => Promise<void>) | undefined;
  /**
   * Push (SEP-2663, "Task Status Notifications"): open tasks are followed on one `subscriptions/listen` stream when
   * the server agrees, polled as a safety net (docs/client.md, "Push"). On by default.
   */
  push?: PushOptions | undefined;
  /**
   * @internal The poll fast path on the transport's own pool (taskGetFastPath.ts): `connectHttpTaskClient` sets it
   * when the transport's fetch is its own.
   */
  taskGetFastPath?: TaskGetFastPath | undefined;
  /** Told about every change the client records; never awaited, errors ignored. */
  onEvent?: ((event: TaskClientEvent) => void) | undefined;
  /** Where traces and metrics go (docs/operations.md, "Observability"). Default: the OpenTelemetry API's global providers. */
  telemetry?: ClientTelemetryOptions | undefined;
}

export type TaskClientEvent =
  | { type: 'status'; record: TaskRecord }
  | { type: 'closed'; record: TaskRecord }
  | { type: 'error'; recordId: string; error: RecordedError }
  /** How open tasks are followed changed: by push (with safety polls), or by polling and why. */
  | { type: 'push'; state: PushState }
  /** The server created task `taskId` and the ledger cannot record it yet: retried for `storagePatienceMs`. */
  | { type: 'unrecorded'; recordId: string; taskId: string; error: RecordedError };

export interface CallToolOptions {
  /** Your business id for the call, kept on the record (S6). */
  correlationId?: string | undefined;
  /** Makes the call idempotent: sent as `_meta["io.closeout/idempotencyKey"]`, and a live record with the key is
   * returned instead of sending again (S16). A record whose answer was lost (`unknown-outcome`) is sent again with the
   * same key, once (a Closeout server answers with the task the lost call created). */
  idempotencyKey?: string | undefined;
  /** Aborts waiting for the tools/call answer; the submission then becomes `unknown-outcome`. */
  signal?: AbortSignal | undefined;
}

export interface ResubmitOptions {
  /**
   * `'reuse'` keeps the old key (a Closeout server then returns the task the lost call created, if it did), `'new'`
   * draws a fresh one, a string sets it. Default: `'reuse'` for `unknown-outcome`, `'new'` otherwise.
   */
  idempotencyKey?: 'reuse' | 'new' | string | undefined;
  signal?: AbortSignal | undefined;
}

export interface ResumeReport {
  /** Open tasks this process now follows. */
  resumed: TaskHandle[];
  /** Submissions sent by a process that died before the answer was recorded: resubmit explicitly if wanted. */
  unknownOutcome: TaskRecord[];
  /** Open tasks another live process follows. */
  leasedElsewhere: TaskRecord[];
}
