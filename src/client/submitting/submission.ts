/**
 * Submission and idempotency (docs/DESIGN.md, "The task's life on the client"): the intent is in the ledger before
 * `tools/call` leaves; a task handle's taskId is committed before anything else is done with it (docs/REQUIREMENTS.md
 * S4); a submission whose answer never arrived is `unknown-outcome`, never re-sent on its own (S13); a call with an
 * idempotency key the ledger already holds gets that call's outcome, never a second send (S16).
 */
import { randomUUID } from 'node:crypto';

import type { CallToolRequest, CallToolResult } from '@modelcontextprotocol/client';
import { ProtocolError } from '@modelcontextprotocol/client';

import type { JsonObject, JsonRpcError } from '../../protocol/index.js';
import { IDEMPOTENCY_KEY_META_KEY, isTerminalStatus } from '../../protocol/index.js';
import { storableText, unstorableField } from '../../protocol/storableText.js';
import type { ClientCore } from '../core/clientCore.js';
import { describe } from '../core/clientCore.js';
import type { CallToolOptions, ResubmitOptions } from '../core/clientOptions.js';
import { nextPollDelay } from '../core/scheduler.js';
import type { CallTrace } from '../core/telemetry.js';
import { connectionError, ledgerFailure, TaskClientError } from '../errors.js';
import type { Following } from '../following/following.js';
import type { TaskRequests } from '../following/taskRequests.js';
import { callThroughInputRounds, InputRoundsError } from '../input/inputRounds.js';
import type { InputRouter } from '../input/inputRouter.js';
import type { Closing, ObservedTask, RecordedError, TaskRecord } from '../ledger/ledger.js';
import { isFollowable, isTransientStorageError } from '../ledger/ledger.js';
import { wireIdempotencyKey } from '../ledger/ledgerKeys.js';
import type { TaskHandle } from '../taskHandle.js';
import { failingOnOversize } from '../transport/answerCap.js';
import { parseCreateTaskResult, sdkServerOutputMessage, ServerOutputError } from '../transport/serverOutput.js';
import { argumentsDigest } from './argumentsDigest.js';

export class Submission {
  /** In-process submissions by idempotency key, so two concurrent calls with one key send once. */
  private readonly submitting = new Map<
    string,
    { toolName: string; argumentsDigest: string; submission: Promise<CallToolResult | TaskHandle> }
  >();
  /** Records whose tools/call is being sent, or its answer recorded, by this process now, by record id. */
  private readonly sending = new Map<string, TaskRecord>();
  /**
   * Tasks the server created whose taskId the ledger could not record within `storagePatienceMs`, by record: the next
   * call with the record's key records and follows this task instead of sending again.
   */
  private readonly unrecorded = new Map<string, ObservedTask>();
  /**
   * The same for answers that end a call without a task (an immediate result, a JSON-RPC error, input rounds the
   * client could not finish): the next call with the record's key records this answer instead of sending again.
   */
  private readonly unrecordedAnswers = new Map<string, Closing>();

  constructor(
    private readonly core: ClientCore,
    private readonly requests: TaskRequests,
    private readonly inputs: InputRouter,
    private readonly following: Following,
  ) {}

  /** The record whose tools/call is on the wire now, when exactly one is (sessionInput.ts: which call asks). */
  soleCallSending(): TaskRecord | undefined {
    if (this.sending.size !== 1) return undefined;
    return this.sending.values().next().value;
  }

  startCall(name: string, args: JsonObject, options: CallToolOptions): Promise<CallToolResult | TaskHandle> {
    assertStorable({
      'the tool name': name,
      idempotencyKey: options.idempotencyKey,
      correlationId: options.correlationId,
    });
    const digest = argumentsDigest(args);
    const key = options.idempotencyKey;
    if (key === undefined) return this.submitNew(name, args, digest, options);
    // registered before the first await, so a concurrent call with the key joins this one instead of sending
    const inFlight = this.submitting.get(key);
    if (inFlight) {
      if (inFlight.toolName !== name || inFlight.argumentsDigest !== digest) {
        throw new TaskClientError('idempotency-conflict', `idempotency key ${key} is in use for ${inFlight.toolName}`);
      }
      return inFlight.submission;
    }
    return this.trackSubmission(
      key,
      name,
      digest,
      (async () => {
        const existing = await this.beforeSending(this.core.ledger.findByIdempotencyKey(this.core.endpoint, key));
        if (existing) return this.fromExisting(existing, name, digest);
        return this.submitNew(name, args, digest, options);
      })(),
    );
  }

  /** A new submission, under its call span (docs/operations.md, "Observability"). */
  private submitNew(
    name: string,
    args: JsonObject,
    digest: string,
    options: CallToolOptions,
  ): Promise<CallToolResult | TaskHandle> {
    return this.core.telemetry.call(name, (call) => this.recordAndSubmit(name, args, digest, options, call));
  }

  private async recordAndSubmit(
    name: string,
    args: JsonObject,
    digest: string,
    options: CallToolOptions,
    call: CallTrace,
  ): Promise<CallToolResult | TaskHandle> {
    const { core } = this;
    // a client made while its server was down connects first: a server still unreachable refuses the call here,
    // before anything is recorded or sent
    await core.ensureConnected().catch((error: unknown) => {
      throw connectionError(core.endpoint, error);
    });
    const keys = await this.beforeSending(core.keys());
    const now = core.clock.now();
    const sentAt = core.steady.now();
    const intent = await this.beforeSending(
      core.ledger.recordIntent({
        recordId: randomUUID(),
        endpoint: core.endpoint,
        toolName: name,
        arguments: args,
        argumentsDigest: digest,
        correlationId: options.correlationId,
        idempotencyKey: options.idempotencyKey,
        wireIdempotencyKey:
          options.idempotencyKey === undefined
            ? undefined
            : wireIdempotencyKey(keys.secret, core.endpoint, options.idempotencyKey),
        credential: keys.credential,
        submittedAt: now,
        leaseHolder: core.leaseHolder,
        leaseExpiresAt: now + core.leaseMs,
        traceContext: call.carrier,
      }),
    );
    // another process recorded the same key between our lookup and our insert
    if (!intent.created) return this.fromExisting(intent.record, name, digest);
    // the intent took the record's lease: proven from when it was sent (selfFence.ts)
    this.following.leases.fence.proven(intent.record.recordId, sentAt);
    return this.submit(intent.record, options.signal, call);
  }

  /** An explicit resubmission, under a call span of its own (docs/operations.md, "Observability"). */
  resubmitRecord(previous: TaskRecord, options: ResubmitOptions): Promise<CallToolResult | TaskHandle> {
    return this.core.telemetry.call(previous.toolName, (call) => this.resubmitUnder(previous, options, call));
  }

  private async resubmitUnder(
    previous: TaskRecord,
    options: ResubmitOptions,
    call: CallTrace,
  ): Promise<CallToolResult | TaskHandle> {
    const { core } = this;
    const named = nameOf(previous);
    if (previous.localState === 'submitting' || isFollowable(previous.localState)) {
      throw new TaskClientError(
        'invalid-state',
        `${named} is ${previous.localState}: cancel or wait for it before resubmitting`,
        { record: previous },
      );
    }
    if (previous.supersededBy) {
      const successor = await core.ledger.get(previous.supersededBy);
      throw new TaskClientError(
        'invalid-state',
        `${named} was already resubmitted as ${successor ? nameOf(successor) : `record ${previous.supersededBy}`}`,
        { record: previous },
      );
    }
    const policy = options.idempotencyKey ?? (previous.localState === 'unknown-outcome' ? 'reuse' : 'new');
    if (policy !== 'reuse' && policy !== 'new') assertStorable({ idempotencyKey: policy });
    const key =
      policy === 'reuse' ? (previous.idempotencyKey ?? randomUUID()) : policy === 'new' ? randomUUID() : policy;
    const keys = await this.beforeSending(core.keys());
    // a reused key goes out as it went before (records older than ledger schema 2 sent it as it is)
    const wireKey =
      key === previous.idempotencyKey
        ? (previous.wireIdempotencyKey ?? previous.idempotencyKey)
        : wireIdempotencyKey(keys.secret, core.endpoint, key);
    const now = core.clock.now();
    const sentAt = core.steady.now();
    const intent = await this.beforeSending(
      core.ledger.recordResubmission(previous.recordId, {
        recordId: randomUUID(),
        endpoint: core.endpoint,
        toolName: previous.toolName,
        arguments: previous.arguments,
        argumentsDigest: previous.argumentsDigest,
        correlationId: previous.correlationId,
        idempotencyKey: key,
        wireIdempotencyKey: wireKey,
        credential: keys.credential,
        submittedAt: now,
        leaseHolder: core.leaseHolder,
        leaseExpiresAt: now + core.leaseMs,
        resubmittedFrom: previous.recordId,
        traceContext: call.carrier,
      }),
    );
    if (!intent.created) {
      // checked again inside the ledger's transaction: of two concurrent resubmissions, one goes through
      if (intent.refused === 'already-resubmitted') {
        throw new TaskClientError('invalid-state', `${named} was already resubmitted as ${nameOf(intent.record)}`, {
          record: intent.record,
        });
      }
      if (intent.refused === 'still-open') {
        throw new TaskClientError(
          'invalid-state',
          `${named} is ${intent.record.localState}: cancel or wait for it before resubmitting`,
          { record: intent.record },
        );
      }
      return this.fromExisting(intent.record, previous.toolName, previous.argumentsDigest);
    }
    this.following.leases.fence.proven(intent.record.recordId, sentAt);
    return this.trackSubmission(
      key,
      previous.toolName,
      previous.argumentsDigest,
      this.submit(intent.record, options.signal, call),
    );
  }

  /**
   * A ledger step before tools/call leaves: its failure (another process holding the write lock past the busy timeout,
   * a ledger gone) is a TaskClientError that says nothing was sent.
   */
  private beforeSending<T>(step: Promise<T>): Promise<T> {
    return step.catch((error: unknown) => {
      throw ledgerFailure(this.core.ledger.location, error, 'nothing was sent');
    });
  }

  private trackSubmission(
    key: string,
    toolName: string,
    digest: string,
    submission: Promise<CallToolResult | TaskHandle>,
  ): Promise<CallToolResult | TaskHandle> {
    const entry = { toolName, argumentsDigest: digest, submission };
    this.submitting.set(key, entry);
    const forget = () => {
      if (this.submitting.get(key) === entry) this.submitting.delete(key);
    };
    submission.then(forget, forget);
    return submission;
  }

  private async submit(
    record: TaskRecord,
    signal: AbortSignal | undefined,
    call: CallTrace,
  ): Promise<CallToolResult | TaskHandle> {
    return this.whileSending(record, () => this.send(record, signal, call));
  }

  private async whileSending<T>(record: TaskRecord, fn: () => Promise<T>): Promise<T> {
    this.sending.set(record.recordId, record);
    try {
      return await fn();
    } finally {
      this.sending.delete(record.recordId);
    }
  }

  private async send(
    record: TaskRecord,
    signal: AbortSignal | undefined,
    call: CallTrace,
  ): Promise<CallToolResult | TaskHandle> {
    const { core } = this;
    const carrier = this.requests.carrier();
    const meta: Record<string, unknown> = { ...this.requests.tasksMeta() };
    const wireKey = record.wireIdempotencyKey ?? record.idempotencyKey;
    if (wireKey !== undefined) meta[IDEMPOTENCY_KEY_META_KEY] = wireKey;
    // from here on, silence means unknown-outcome. A process that no longer holds the record (paused past its lease,
    // while another settled it as never sent, which a resubmission may have believed) sends nothing
    if (!(await this.beforeSending(core.ledger.markSent(record.recordId, core.leaseHolder, core.clock.now())))) {
      const now = await core.ledger.get(record.recordId);
      throw new TaskClientError(
        'invalid-state',
        `record ${record.recordId} is ${now?.localState ?? 'gone'}${now?.terminalReason ? ` (${now.terminalReason})` : ''}: another process took it over while this one held it past its lease; tools/call was not sent`,
        { record: now ?? record },
      );
    }
    let result: CallToolResult;
    try {
      // MRTR rounds (an InputRequiredResult before any task) are answered here, through the input handlers
      result = (await callThroughInputRounds({
        params: { name: record.toolName, arguments: record.arguments, _meta: meta },
        send: (params) =>
          core.telemetry.request(
            'tools/call',
            { 'gen_ai.tool.name': record.toolName },
            meta,
            () =>
              failingOnOversize(
                (sent) =>
                  core.client.callTool(params as CallToolRequest['params'], {
                    timeout: core.requestTimeoutMs,
                    allowInputRequired: true,
                    signal: sent,
                  }),
                signal,
              ),
            // a CreateTaskResult arrives as the carrier error: an answer, and the task joins the call's trace
            (error) => {
              const taskId = carrier.extract(error)?.['taskId'];
              if (typeof taskId === 'string') core.telemetry.taskCreated(taskId, call);
              return taskId !== undefined;
            },
            call,
          ),
        fulfil: (inputRequests) => this.inputs.fulfil(record, inputRequests, signal),
        signal,
      })) as CallToolResult;
    } catch (error) {
      const carried = carrier.extract(error);
      if (carried) return this.acceptTask(record, carried);
      if (error instanceof InputRoundsError) throw await this.failInputRounds(record, error);
      throw await this.failSubmission(record, error);
    }
    const recorded = await this.closeAnswered(
      record,
      { localState: 'terminal', reason: 'immediate result', result: result as JsonObject, arrived: true },
      core.clock.now(),
    );
    if (recorded) await core.emitClosed(record.recordId);
    return result;
  }

  /** The server created a task: commit its taskId first (S4), then follow it. */
  private async acceptTask(record: TaskRecord, raw: Record<string, unknown>): Promise<CallToolResult | TaskHandle> {
    let task: ObservedTask;
    try {
      task = parseCreateTaskResult(raw);
    } catch (error) {
      throw await this.failSubmission(record, error);
    }
    return this.recordArrived(record, task);
  }

  private async recordArrived(record: TaskRecord, task: ObservedTask): Promise<CallToolResult | TaskHandle> {
    const { core } = this;
    if (!(await this.commitArrived(record, task))) {
      // another record follows this task already (a resubmission that reused the key): that one is the handle
      const holder = await core.ledger.findByTaskId(core.endpoint, task.taskId);
      if (holder && holder.recordId !== record.recordId) {
        return this.fromExisting(holder, holder.toolName, holder.argumentsDigest);
      }
      const now = await core.ledger.get(record.recordId);
      throw new TaskClientError(
        'invalid-state',
        `tools/call answered task ${task.taskId}, and record ${record.recordId} cannot take it (${now?.localState ?? 'gone'}${now?.taskId ? `, task ${now.taskId}` : ''})`,
        { record: now ?? record },
      );
    }
    const committed = await core.reload(record.recordId);
    core.emit({ type: 'status', record: committed });
    if (committed.localState === 'terminal') {
      core.emit({ type: 'closed', record: committed });
      return this.following.closedHandle(committed);
    }
    // the first tasks/get waits for the server's suggested interval, like every later one (S5), unless the seed
    // state already asks for something only tasks/get carries (a terminal result, the inputRequests)
    const needsDetail = isTerminalStatus(task.status) || task.status === 'input_required';
    const delay = needsDetail ? 0 : nextPollDelay(task.pollIntervalMs, this.following.scheduler.policy, core.random);
    core.live.restartAge(record.recordId, core.steady.now());
    // an attach() or resumeAll() that ran while the taskId was being committed may hold the handle already
    return this.following.startFollowing(committed, core.steady.now() + delay);
  }

  /**
   * The server answered every round, but asked for input this client could not give, or too many rounds, or broke
   * the InputRequiredResult shape: nothing ran on the server (MRTR comes before any task), so the record is closed
   * with the reason, not left `unknown-outcome`.
   */
  private async failInputRounds(record: TaskRecord, error: InputRoundsError): Promise<TaskClientError> {
    const { core } = this;
    const now = core.clock.now();
    const reason =
      error.reason === 'input-unavailable'
        ? `tools/call needs input this client could not give: ${error.message}`
        : `tools/call did not end its input rounds: ${error.message}`;
    const kind = error.reason === 'input-unavailable' ? 'input' : 'server-output';
    await this.closeAnswered(
      record,
      { localState: 'terminal', reason, lastError: { kind, message: error.message, at: now } },
      now,
    );
    const closed = await core.emitClosed(record.recordId);
    return new TaskClientError(
      error.reason === 'input-unavailable' ? 'input-unavailable' : 'bad-server-output',
      `${reason} (record ${record.recordId})`,
      { record: closed ?? record, cause: error },
    );
  }

  /**
   * Commit a taskId that arrived (docs/DESIGN.md rule 10): a ledger another process holds locked (or a full disk) is
   * retried (`patiently`), and an `unrecorded` event names the taskId meanwhile, so it is never only in this
   * process's memory. After that, the error says which task the server created.
   */
  private async commitArrived(record: TaskRecord, task: ObservedTask): Promise<boolean> {
    const { core } = this;
    try {
      const committed = await this.patiently(
        () => {
          const now = core.clock.now();
          return core.ledger.commitTask(record.recordId, core.leaseHolder, task, now, now + core.leaseMs);
        },
        (error) => {
          const lastError: RecordedError = {
            kind: 'storage',
            message: `the ledger cannot record task ${task.taskId} yet: ${describe(error)}`,
            at: core.clock.now(),
          };
          core.emit({ type: 'unrecorded', recordId: record.recordId, taskId: task.taskId, error: lastError });
        },
      );
      this.unrecorded.delete(record.recordId);
      return committed;
    } catch (error) {
      if (!isTransientStorageError(error)) throw error;
      this.unrecorded.set(record.recordId, task);
      throw new TaskClientError(
        'storage',
        `the server created task ${task.taskId}, and the ledger could not record it for ${Math.round(core.storagePatienceMs / 1000)} s (${describe(error)}); record ${record.recordId} stays as it was: call again with its idempotency key, or resume, once the ledger is free`,
        { record, cause: error },
      );
    }
  }

  /**
   * Close a record out with the answer that ended its call without a task (an immediate result, a JSON-RPC error,
   * input rounds this client could not finish). An answer that arrived is a fact (docs/DESIGN.md rule 10): a busy
   * ledger is waited for as for a taskId, and an answer (`closing.arrived`) also closes the record when another
   * process settled it `unknown-outcome` meanwhile; otherwise a call again with the key would run the tool again,
   * since no server recognises the key of a call that made no task. Past patience the answer stays in this process
   * (`unrecordedAnswers`) for such a call, and the error says so. False when the record had left the states it closes.
   */
  private async closeAnswered(record: TaskRecord, closing: Closing, at: number): Promise<boolean> {
    const { core } = this;
    try {
      const closed = await this.patiently(() => core.ledger.closeOut(record.recordId, core.leaseHolder, closing, at));
      this.unrecordedAnswers.delete(record.recordId);
      return closed;
    } catch (error) {
      if (!isTransientStorageError(error)) throw error;
      const again =
        record.idempotencyKey === undefined
          ? 'it was sent without an idempotency key, so nothing can tell a call again from a new one'
          : 'call again with its idempotency key in this process once the ledger is free, or it will be sent again';
      if (record.idempotencyKey !== undefined) this.unrecordedAnswers.set(record.recordId, closing);
      throw new TaskClientError(
        'storage',
        `the server answered tools/call (${closing.reason}), and the ledger could not record it for ${Math.round(core.storagePatienceMs / 1000)} s (${describe(error)}); record ${record.recordId} stays as it was: ${again}`,
        { record, cause: error },
      );
    }
  }

  /**
   * A ledger write of something the server answered, retried with backoff for `storagePatienceMs` while the ledger
   * fails for a reason that passes (another process holding it locked, a full disk); `waiting` is told of the first
   * failure. Any other error, or the last one once patience is spent, rejects.
   */
  private async patiently<T>(write: () => Promise<T>, waiting?: (error: unknown) => void): Promise<T> {
    const { core } = this;
    // patience is a duration: measured on the steady clock, which a wall-clock step does not move
    const started = core.steady.now();
    let delayMs = 50;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await write();
      } catch (error) {
        if (!isTransientStorageError(error)) throw error;
        if (attempt === 1) waiting?.(error);
        if (core.steady.now() - started >= core.storagePatienceMs) throw error;
        await new Promise<void>((resolve) => core.clock.setTimeout(resolve, delayMs));
        delayMs = Math.min(delayMs * 2, 2_000);
      }
    }
  }

  /** Record why a submission did not produce a result or handle, and build the error to throw. */
  private async failSubmission(record: TaskRecord, error: unknown): Promise<unknown> {
    const { core } = this;
    const now = core.clock.now();
    const badOutput = error instanceof ServerOutputError ? error.message : sdkServerOutputMessage(error);
    if (error instanceof ProtocolError && badOutput === undefined) {
      // the server answered with a JSON-RPC error: no task exists; keep the error as the outcome
      const rpcError: JsonRpcError = { code: error.code, message: error.message, data: error.data };
      const recorded = await this.closeAnswered(
        record,
        {
          localState: 'terminal',
          // the server's message is free text: kept alike on every ledger (docs/DESIGN.md rule 14)
          reason: storableText(`tools/call failed: ${error.code} ${error.message}`),
          error: rpcError,
          arrived: true,
        },
        now,
      );
      if (recorded) await core.emitClosed(record.recordId);
      return error;
    }
    const lastError: RecordedError =
      badOutput !== undefined
        ? { kind: 'server-output', message: badOutput, at: now }
        : this.requests.describeError('tools/call', error);
    const reason =
      badOutput !== undefined
        ? `tools/call answer could not be used: ${badOutput}`
        : `tools/call got no answer: ${lastError.message}`;
    await core.ledger.closeOut(
      record.recordId,
      core.leaseHolder,
      { localState: 'unknown-outcome', reason, lastError },
      now,
    );
    const closed = await core.emitClosed(record.recordId);
    return new TaskClientError(
      badOutput !== undefined ? 'bad-server-output' : 'unknown-outcome',
      `${reason} (record ${record.recordId}; resubmit explicitly if wanted)`,
      { record: closed ?? record, cause: error },
    );
  }

  /** A second call with a key the ledger already holds: the same outcome, never a second send (S16). */
  private async fromExisting(record: TaskRecord, name: string, digest: string): Promise<CallToolResult | TaskHandle> {
    const { core } = this;
    assertSameCall(record, name, digest);
    switch (record.localState) {
      case 'submitting': {
        // this process's own submission, not being sent now: its send ended without an outcome the ledger could take
        if (record.leaseHolder === core.leaseHolder && !this.sending.has(record.recordId)) {
          return this.whileSending(record, () => this.recoverOwn(record));
        }
        const holderDead = await this.following.leases.freeLeasesOfDeadHolders([record]);
        const leaseLive =
          !holderDead && record.leaseExpiresAt !== undefined && record.leaseExpiresAt >= core.clock.now();
        if (leaseLive) {
          throw new TaskClientError(
            'leased-elsewhere',
            `idempotency key ${record.idempotencyKey} is being submitted by ${record.leaseHolder}`,
            { record },
          );
        }
        // a lapsed lease says its holder is gone only through the takeover gate, as on every path that takes a record
        // over (leaseKeeper.ts): a ledger that stalled lets every live holder's lease lapse, and this settles them all
        const settled = await core.ledger.settleAbandonedSubmissions(
          core.endpoint,
          this.following.leases.lapsedBefore(core.clock.now()),
          'found on call',
        );
        const now = settled.find((item) => item.recordId === record.recordId) ?? (await core.reload(record.recordId));
        if (now.localState === 'unknown-outcome') return this.recoverUnknown(now);
        if (now.localState === 'submitting') {
          throw new TaskClientError(
            'leased-elsewhere',
            `idempotency key ${record.idempotencyKey} is being submitted by ${now.leaseHolder}`,
            { record: now },
          );
        }
        // its late answer arrived meanwhile (docs/DESIGN.md rule 10)
        return this.fromExisting(now, name, digest);
      }
      case 'tracking':
      case 'detached': {
        const live = core.live.get(record.recordId);
        if (live) return live;
        const handle = await this.following.follow(record, false);
        if (handle) return handle;
        throw new TaskClientError(
          'leased-elsewhere',
          `idempotency key ${record.idempotencyKey}: task ${record.taskId} is followed by ${record.leaseHolder}`,
          { record },
        );
      }
      case 'terminal':
        if (record.taskId) return this.following.closedHandle(record);
        if (record.result) return record.result as CallToolResult;
        if (record.error) throw new ProtocolError(record.error.code, record.error.message, record.error.data);
        throw new TaskClientError('invalid-state', `record ${record.recordId} ended without a result`, { record });
      case 'unknown-outcome':
        return this.recoverUnknown(record);
      case 'expired':
        throw new TaskClientError(
          record.localState,
          `idempotency key ${record.idempotencyKey} is ${record.localState} (${record.terminalReason}); use resubmit()`,
          { record },
        );
    }
  }

  /**
   * A submission of this process that ended while the ledger could not take its outcome (a locked ledger, a database
   * outage): the lease on it is this process's own and stays renewed, so nobody else would ever settle it. The task
   * the server created, or the answer that ended the call, when one arrived, is recorded now; otherwise nothing is
   * known of what the call did, which is an unknown outcome, recovered as a lost answer is (sent again with the same
   * key).
   */
  private async recoverOwn(record: TaskRecord): Promise<CallToolResult | TaskHandle> {
    const { core } = this;
    const arrived = this.unrecorded.get(record.recordId);
    if (arrived) return this.recordArrived(record, arrived);
    const answered = this.unrecordedAnswers.get(record.recordId);
    if (answered) {
      if (await this.closeAnswered(record, answered, core.clock.now())) await core.emitClosed(record.recordId);
      return this.fromExisting(await core.reload(record.recordId), record.toolName, record.argumentsDigest);
    }
    const now = core.clock.now();
    await core.ledger.closeOut(
      record.recordId,
      core.leaseHolder,
      {
        localState: 'unknown-outcome',
        reason: 'its tools/call ended in this process without an outcome the ledger could record',
      },
      now,
    );
    return this.recoverUnknown(await core.reload(record.recordId));
  }

  /**
   * The same call again (same key, tool and arguments) after its answer was lost: sent again with the same key, so a
   * Closeout server answers with the task the lost call created instead of running the tool a second time. The
   * ledger lets one resubmission of the record through; a caller that loses that race joins the winner.
   */
  private async recoverUnknown(record: TaskRecord): Promise<CallToolResult | TaskHandle> {
    try {
      return await this.resubmitRecord(record, { idempotencyKey: 'reuse' });
    } catch (error) {
      if (!(error instanceof TaskClientError && error.code === 'invalid-state')) throw error;
      const current = record.idempotencyKey
        ? await this.core.ledger.findByIdempotencyKey(this.core.endpoint, record.idempotencyKey)
        : undefined;
      if (!current || current.recordId === record.recordId) throw error;
      return this.fromExisting(current, record.toolName, record.argumentsDigest);
    }
  }
}

function assertSameCall(record: TaskRecord, name: string, digest: string): void {
  if (record.toolName !== name || record.argumentsDigest !== digest) {
    throw new TaskClientError(
      'idempotency-conflict',
      `idempotency key ${record.idempotencyKey} was used for ${record.toolName} with other arguments`,
      { record },
    );
  }
}

/** A record as people know it: its taskId, else (a call that never got one) the record id. */
function nameOf(record: TaskRecord): string {
  return record.taskId ? `task ${record.taskId}` : `record ${record.recordId}`;
}

/**
 * A call's strings that the ledger keeps and the wire carries must be text every store holds as it is (docs/DESIGN.md
 * rule 14): refused, naming the field, before anything is written or sent.
 */
function assertStorable(fields: Record<string, string | undefined>): void {
  for (const [field, value] of Object.entries(fields)) {
    const refused = typeof value === 'string' ? unstorableField(field, value) : undefined;
    if (refused !== undefined) throw new TaskClientError('invalid-argument', refused);
  }
}
