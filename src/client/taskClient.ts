/**
 * TaskClient: call tools on any Tasks server and close out every result (docs/DESIGN.md, "The task's life on the
 * client"; docs/REQUIREMENTS.md S1..S17). It sits on an SDK `Client` (Streamable HTTP or stdio) and a Ledger:
 *
 * - submit: the intent is in the ledger before `tools/call` leaves; a task handle's taskId is committed before
 *   anything else is done with it; a submission whose answer never arrived is `unknown-outcome`, never re-sent;
 * - follow: one PollScheduler polls every open task at the server's `pollIntervalMs`, backs off on transport
 *   failures and records them, and stops at the first terminal status;
 * - input: `inputRequests` go to the application's handlers once per key, answers stored before they are sent;
 * - recover: `resumeAll()` takes up every open record after a crash, querying each once before anything else;
 * - one holder: a lease per record keeps two processes from driving one task.
 *
 * This file is the front: the options, and the TaskClient that delegates to `submission.ts` (submit, idempotency),
 * `following.ts` (polling, close-out, resume, cancel) and `taskRequests.ts` (the task requests and their checks),
 * which share `clientCore.ts`.
 */
import type { CallToolResult, Client } from '@modelcontextprotocol/client';

import type { InputResponse, JsonObject } from '../protocol/index.js';
import { TASK_METHODS } from '../protocol/index.js';
import { ClientCore, DEFAULT_STORAGE_PATIENCE_MS } from './core/clientCore.js';
import type { CallToolOptions, ResubmitOptions, ResumeReport, TaskClientOptions } from './core/clientOptions.js';
import { TaskClientError } from './errors.js';
import { Following } from './following/following.js';
import type { PushState } from './following/pushFollower.js';
import { TaskRequests } from './following/taskRequests.js';
import { InputRouter } from './input/inputRouter.js';
import { answerSessionInput } from './input/sessionInput.js';
import type { HistoryEntry, Ledger, LedgerFilter, TaskRecord } from './ledger/ledger.js';
import { Submission } from './submitting/submission.js';
import { TaskHandle } from './taskHandle.js';

export type {
  CallToolOptions,
  ResubmitOptions,
  ResumeReport,
  TaskClientEvent,
  TaskClientOptions,
} from './core/clientOptions.js';

/** True when `callTool` answered with a task handle rather than an immediate result (S3). */
export function isTaskHandle(value: CallToolResult | TaskHandle): value is TaskHandle {
  return value instanceof TaskHandle;
}

export class TaskClient {
  readonly endpoint: string;
  readonly leaseHolder: string;
  readonly ledger: Ledger;
  readonly client: Client;
  private readonly core: ClientCore;
  private readonly inputs: InputRouter;
  private readonly following: Following;
  private readonly submission: Submission;
  /** Public operations under way (callTool, resubmit, attach, resumeAll): close() lets each finish first. */
  private readonly operations = new Set<Promise<unknown>>();

  constructor(private readonly options: TaskClientOptions) {
    const core = new ClientCore(options);
    this.core = core;
    this.client = core.client;
    this.ledger = core.ledger;
    this.endpoint = core.endpoint;
    this.leaseHolder = core.leaseHolder;
    const requests = new TaskRequests(core);
    this.inputs = new InputRouter({
      ledger: core.ledger,
      leaseHolder: core.leaseHolder,
      handlers: core.telemetry.traceHandlers(options.inputHandlers ?? {}),
      now: () => core.clock.now(),
      sendUpdate: (taskId, inputResponses) => requests.send(TASK_METHODS.update, { taskId, inputResponses }),
      recordError: (recordId, error) => core.recordError(recordId, error),
      resendAfterMs: options.inputResendAfterMs ?? 5_000,
      storagePatienceMs: options.storagePatienceMs ?? DEFAULT_STORAGE_PATIENCE_MS,
      sleep: (ms) => new Promise<void>((resolve) => core.clock.setTimeout(resolve, ms)),
      // a failed handler is asked again at a poll: one is due then, even when push makes polls rare
      pollAt: (recordId, delayMs) => {
        if (this.following.scheduler.has(recordId)) {
          this.following.scheduler.schedule(recordId, core.steady.now() + delayMs);
        }
      },
      lease: {
        isHeld: (recordId) => this.following.leases.fence.isHeld(recordId),
        watch: (recordId) => this.following.leases.fence.watch(recordId),
      },
    });
    this.following = new Following(core, requests, this.inputs);
    this.submission = new Submission(core, requests, this.inputs, this.following);
    answerSessionInput(core.client, core.telemetry.traceHandlers(options.inputHandlers ?? {}), () =>
      this.submission.soleCallSending(),
    );
    this.following.start();
  }

  /**
   * Call a tool, declaring the Tasks extension on this request only (S1, S2). Resolves with the CallToolResult when
   * the server answered at once, or with a TaskHandle when it created a task (S3); `isTaskHandle` tells them apart.
   * A JSON-RPC error from the server is rethrown as the SDK's ProtocolError after it is recorded.
   */
  async callTool(
    name: string,
    args: JsonObject = {},
    options: CallToolOptions = {},
  ): Promise<CallToolResult | TaskHandle> {
    this.core.assertOpen();
    return this.operation(this.submission.startCall(name, args, options));
  }

  /**
   * Take up every open record of this endpoint after a crash or restart (S12): submissions left `submitting` by a
   * dead process become `unknown-outcome`; each open task is queried once before anything else (S7).
   */
  resumeAll(): Promise<ResumeReport> {
    this.core.assertOpen();
    return this.operation(this.following.resumeOpen());
  }

  /** Follow one open record (e.g. a detached one) in this process; throws when another process holds it. */
  attach(ref: string): Promise<TaskHandle> {
    this.core.assertOpen();
    return this.operation(this.following.attachRecord(ref));
  }

  /**
   * Ms until this client may take a record over from a holder whose lease ran out but whom the kernel does not prove
   * dead (the takeover gate, docs/DESIGN.md rule 11), if the ledger keeps answering promptly; 0 when it may now. A
   * client just made waits a lease and a third of one (its first renewal goes out a third of a lease in), and a
   * ledger stall starts the wait again. Until then `resumeAll`, `attach` and `callTool` leave such records as
   * `leasedElsewhere` / `leased-elsewhere`.
   */
  takeoverOpensInMs(): number {
    return this.following.leases.takeoverOpensInMs();
  }

  /** How this client follows its open tasks now: by push (with safety polls), or by polling and why. */
  pushState(): PushState {
    return this.following.push.state();
  }

  /** The ledger record for a taskId, record id or idempotency key. */
  async get(ref: string): Promise<TaskRecord | undefined> {
    return this.core.find(ref);
  }

  /** Ledger records of this endpoint (or of `filter.endpoint`). */
  list(filter: LedgerFilter = {}): Promise<TaskRecord[]> {
    return this.ledger.list({ ...filter, endpoint: filter.endpoint ?? this.endpoint });
  }

  /** Every observed status and local-state change of a record, oldest first (S15). */
  async history(ref: string): Promise<HistoryEntry[]> {
    return this.ledger.history((await this.core.resolve(ref)).recordId);
  }

  /**
   * Send `tasks/cancel` (S11): an acknowledged intent, not an outcome. The task is followed until it ends, which may
   * still be `completed`. -32602 marks the record expired.
   */
  async cancel(ref: string): Promise<void> {
    return this.following.cancel(ref);
  }

  /** Answer an input request by hand (e.g. when no handler exists for it); the first stored answer wins. */
  async answer(ref: string, key: string, response: InputResponse): Promise<boolean> {
    this.core.assertOpen();
    const record = await this.core.resolve(ref);
    const known = record.inputs.find((input) => input.key === key);
    if (!record.taskId || !known) {
      throw new TaskClientError('invalid-state', `task ${record.taskId ?? record.recordId} has no input ${key}`, {
        record,
      });
    }
    if (record.leaseHolder !== this.leaseHolder) {
      throw new TaskClientError('leased-elsewhere', `attach task ${record.taskId} before answering its input`, {
        record,
      });
    }
    return this.inputs.answer(record, record.taskId, key, known.request, response);
  }

  /** Whether this client's own `inputHandlers` answer input requests of `method` (an adapter asks for the rest). */
  handlesInput(method: string): boolean {
    const handlers = this.options.inputHandlers ?? {};
    if (method === 'elicitation/create') return handlers.elicitation !== undefined;
    if (method === 'sampling/createMessage') return handlers.sampling !== undefined;
    if (method === 'roots/list') return handlers.roots !== undefined;
    return false;
  }

  /**
   * Query a task once now and record what the server says; for a terminal record it only checks that the server
   * still agrees (a change after terminal is recorded as bad server output, the record stays as it was).
   */
  async refresh(ref: string): Promise<TaskRecord> {
    this.core.assertOpen();
    return this.following.refresh(ref);
  }

  /**
   * Check an `expired` record again (a wrong credential, a misconfigured or restored server can make a live task look
   * gone): when the server still answers for the task, the record is tracked again by this process and what the
   * server says is recorded; a terminal answer closes it out with its result. Resolves with the handle when the
   * task is followed again, undefined when it stays expired (the answer is recorded as the last error).
   */
  async recheck(ref: string): Promise<TaskHandle | undefined> {
    this.core.assertOpen();
    return this.following.recheck(ref);
  }

  /**
   * Submit again, explicitly (S13: never automatic). Only a record that is no longer open can be resubmitted; the
   * old record is marked superseded by the new one.
   */
  resubmit(ref: string, options: ResubmitOptions = {}): Promise<CallToolResult | TaskHandle> {
    this.core.assertOpen();
    return this.operation(this.core.resolve(ref).then((previous) => this.submission.resubmitRecord(previous, options)));
  }

  /**
   * Stop following tasks in this process and hand their leases back so another process can take over at once.
   * Operations already under way finish first: a tools/call in flight gets its answer (each waits at
   * most `requestTimeoutMs`, or until its own signal aborts it), so a task the server created is committed rather
   * than filed unknown-outcome, and the handle the call resolves with is settled (rejected as `closed`) below.
   */
  async close(): Promise<void> {
    if (this.core.closed) return;
    this.core.closed = true;
    while (this.operations.size > 0) await Promise.allSettled([...this.operations]);
    await this.following.stop();
    if (this.options.ownsClient) await this.client.close();
    if (this.options.ownsLedger) await this.ledger.dispose();
    await this.options.onClosed?.();
  }

  private operation<T>(work: Promise<T>): Promise<T> {
    this.operations.add(work);
    const done = () => this.operations.delete(work);
    work.then(done, done);
    return work;
  }
}
