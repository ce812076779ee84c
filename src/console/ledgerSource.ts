/**
 * A client ledger in the console: its records listed and shown (the ledger's listing, recordListing.ts), and the
 * client half's own actions on them. An answer, a cancel and a resubmission go through a TaskClient as `closeout
 * answer`, `cancel` and `resubmit` do: the answer is stored in the ledger before `tasks/update` carries it
 * (docs/DESIGN.md rule 10). A record the console acts on is followed here until it closes out (or the console stops and
 * hands its lease back), so the page sees how it ends; an input its polls bring waits for a person's answer in the page.
 */
import type { ElicitRequest, ElicitResult } from '@modelcontextprotocol/client';

import { TaskClientError } from '../client/errors.js';
import type { TaskInputContext, TaskInputHandlers } from '../client/input/inputRouter.js';
import type { InputAnswer, Ledger, TaskRecord } from '../client/ledger/ledger.js';
import { isFollowable } from '../client/ledger/ledger.js';
import type { RecordListQuery } from '../client/ledger/recordListing.js';
import { RECORD_STATUSES, recordStatus } from '../client/ledger/recordListing.js';
import type { TaskClient } from '../client/taskClient.js';
import { isTaskHandle } from '../client/taskClient.js';
import type { TaskHandle } from '../client/taskHandle.js';
import { parseTraceparent } from '../protocol/traceContext.js';
import { listedIds, refusedQuery } from './sourceListing.js';
import type {
  ConsoleActionResult,
  ConsoleDetail,
  ConsoleInput,
  ConsoleList,
  ConsoleQuery,
  ConsoleSource,
  ConsoleStatus,
} from './view.js';
import { ConsoleRequestError } from './view.js';

/** A TaskClient on the console's ledger for a server: the application's own, or one the console connects. */
export type ConnectLedgerClient = (endpoint: string) => Promise<TaskClient>;

/** Statuses a record can be cancelled in: its task is still open. */
const CANCELLABLE: readonly ConsoleStatus[] = ['working', 'input_required'];
/** Statuses a record can be submitted again from (docs/REQUIREMENTS.md S13: explicitly, never by itself). */
const RESUBMITTABLE: readonly ConsoleStatus[] = ['unknown-outcome', 'expired', 'failed'];

interface Parked {
  resolve: (result: ElicitResult) => void;
  request: ElicitRequest;
}

export class LedgerSource implements ConsoleSource {
  readonly kind = 'ledger';
  readonly statuses = RECORD_STATUSES;
  /** Elicitations the console's TaskClients were asked, waiting for a person's answer: `recordId\0key`. */
  private readonly parked = new Map<string, Parked>();
  /** Records this process follows because the console acted on them. */
  private readonly followed = new Map<string, TaskHandle>();

  /**
   * The input handlers for the TaskClients the console acts through (`ConsoleOptions.connect` gives them to its
   * clients): an elicitation waits, stored nowhere but the ledger's `askedAt`, until a person answers it in the page.
   */
  readonly inputHandlers: TaskInputHandlers = {
    elicitation: (request, context) => this.park(request, context),
  };

  constructor(
    private readonly ledger: Ledger,
    readonly shown: string,
    private readonly connect: ConnectLedgerClient,
  ) {}

  async list(query: ConsoleQuery): Promise<ConsoleList> {
    const { listRecords, countRecords } = this.ledger;
    if (!listRecords || !countRecords) {
      throw new ConsoleRequestError(501, `the ledger at ${this.shown} cannot list its records`);
    }
    const listing: RecordListQuery = {
      status: query.status,
      toolName: query.tool,
      search: query.search,
      cursor: query.cursor,
      limit: query.limit,
    };
    const [page, counts] = await Promise.all([
      listRecords.call(this.ledger, listing),
      countRecords.call(this.ledger, listing),
    ]).catch(refusedQuery);
    return {
      source: this.kind,
      rows: page.records.map((record) => ({
        id: record.recordId,
        taskId: record.taskId,
        toolName: record.toolName,
        status: record.status,
        statusMessage: record.statusMessage,
        at: record.submittedAt,
        correlationId: record.correlationId,
        cancelRequested: record.cancelRequestedAt !== undefined,
      })),
      counts,
      nextCursor: page.nextCursor,
      now: this.ledger.now(),
    };
  }

  async detail(id: string): Promise<ConsoleDetail | undefined> {
    const record = await this.ledger.get(id);
    if (!record) return undefined;
    const history = await this.ledger.history(id);
    const status = recordStatus(record);
    const facts: Array<[string, string]> = [['server', record.endpoint]];
    const fact = (label: string, value: string | number | undefined) => {
      if (value !== undefined) facts.push([label, String(value)]);
    };
    fact('record', record.recordId);
    fact('local state', record.localState);
    fact('correlation id', record.correlationId);
    fact('idempotency key', record.idempotencyKey);
    if (record.leaseHolder && isFollowable(record.localState)) {
      fact('followed by', this.followed.has(id) ? `${record.leaseHolder} (this console)` : record.leaseHolder);
    }
    if (record.ttlMs !== undefined) fact('ttl', record.ttlMs === null ? 'unlimited' : `${record.ttlMs} ms`);
    fact('last poll', record.lastPollAt && new Date(record.lastPollAt).toISOString());
    if (record.lastError) fact('last error', `${record.lastError.kind}: ${record.lastError.message}`);
    fact('closed out', record.terminalReason);
    fact('cancel requested', record.cancelRequestedAt && new Date(record.cancelRequestedAt).toISOString());
    fact('resubmitted from', record.resubmittedFrom);
    fact('resubmitted as', record.supersededBy);
    const inputs = record.inputs.map((input) => this.inputView(record, input));
    const open = isFollowable(record.localState);
    return {
      source: this.kind,
      id: record.recordId,
      taskId: record.taskId,
      toolName: record.toolName,
      status,
      statusMessage: record.statusMessage,
      arguments: record.arguments,
      facts,
      timeline: history.map((entry) => {
        // the server's status while the client tracks the task, else what the client knows (detached, expired...)
        const tracked = entry.localState === 'tracking' || entry.localState === 'terminal';
        const what = tracked ? (entry.status ?? entry.localState) : entry.localState;
        return {
          at: entry.observedAt,
          what,
          detail: [what === entry.status ? undefined : entry.status, entry.statusMessage, entry.note]
            .filter(Boolean)
            .join(' · '),
        };
      }),
      inputs,
      steps: undefined,
      checkpoint: undefined,
      result: record.result,
      error: record.error,
      traceId: parseTraceparent(record.traceContext?.traceparent)?.traceId,
      actions: {
        answer: open && inputs.some((input) => input.open),
        cancel: open && record.taskId !== undefined && CANCELLABLE.includes(status),
        resubmit: record.supersededBy === undefined && RESUBMITTABLE.includes(status),
        follow: open && record.taskId !== undefined && !this.followed.has(id) && !this.leaseLive(record),
      },
      now: this.ledger.now(),
    };
  }

  async follow(id: string): Promise<ConsoleActionResult> {
    const record = await this.require(id);
    refuseUnlessOpen(record, 'follow');
    const client = await this.connect(record.endpoint);
    await this.attach(client, record);
    await client.refresh(record.recordId);
    return { ok: true, message: `following ${refOf(record)} here until it closes out` };
  }

  async answer(id: string, key: string, response: unknown): Promise<ConsoleActionResult> {
    const record = await this.require(id);
    const input = record.inputs.find((i) => i.key === key);
    if (!input) throw new ConsoleRequestError(404, `${refOf(record)} has no input ${JSON.stringify(key)}`);
    if (input.response !== undefined) {
      throw new ConsoleRequestError(409, `input ${JSON.stringify(key)} was answered already`);
    }
    refuseUnlessOpen(record, 'answer');
    const answer = await checkedAnswer(input, response);
    const parked = this.parked.get(parkKey(id, key));
    if (parked) {
      // the console's own poll asked: its input router stores the answer, then sends it
      this.parked.delete(parkKey(id, key));
      parked.resolve(answer);
      return { ok: true, message: `answer to ${JSON.stringify(key)} stored; it is on its way to the server` };
    }
    const client = await this.connect(record.endpoint);
    const held = await this.attach(client, record);
    if (!held) {
      // the follower elsewhere sends stored answers (docs/DESIGN.md rule 10)
      await this.ledger.recordInputAnswer(id, client.leaseHolder, key, input.request, answer, this.ledger.now());
      return { ok: true, message: `answer stored: ${record.leaseHolder ?? 'the process'} following the task sends it` };
    }
    await client.answer(id, key, answer);
    return { ok: true, message: `answer to ${JSON.stringify(key)} sent to the server (tasks/update)` };
  }

  async cancel(id: string): Promise<ConsoleActionResult> {
    const record = await this.require(id);
    refuseUnlessOpen(record, 'cancel');
    const client = await this.connect(record.endpoint);
    await this.attach(client, record);
    await client.cancel(id);
    return { ok: true, message: `cancel of ${refOf(record)} acknowledged by the server (it may still complete)` };
  }

  async cancelAll(query: ConsoleQuery, max: number): Promise<ConsoleActionResult> {
    const statuses = (query.status ?? CANCELLABLE).filter((status) => CANCELLABLE.includes(status));
    if (statuses.length === 0) return { ok: true, message: 'no open task matches: nothing to cancel' };
    const ids = await listedIds(
      (page) => this.list(page),
      { ...query, status: statuses },
      max,
      (row) => row.taskId !== undefined,
    );
    const failed: string[] = [];
    for (const id of ids) {
      await this.cancel(id).catch((error: unknown) => failed.push(`${id}: ${messageOf(error)}`));
    }
    const done = ids.length - failed.length;
    return {
      ok: failed.length === 0,
      message: `${done} of ${ids.length} cancelled${failed.length > 0 ? `; failed: ${failed.slice(0, 3).join('; ')}` : ''}`,
    };
  }

  async resubmit(id: string): Promise<ConsoleActionResult> {
    const record = await this.require(id);
    const status = recordStatus(record);
    if (!RESUBMITTABLE.includes(status) || record.supersededBy !== undefined) {
      throw new ConsoleRequestError(
        409,
        record.supersededBy
          ? `${refOf(record)} was resubmitted already, as ${record.supersededBy}`
          : `${refOf(record)} is ${status}: only an unknown outcome, an expiry or a failure is resubmitted`,
      );
    }
    const client = await this.connect(record.endpoint);
    // the old idempotency key for an unknown outcome (the lost call's task comes back), a fresh one otherwise
    const answer = await client.resubmit(id);
    const next = await this.ledger.get(id);
    const newId = next?.supersededBy;
    if (newId && isTaskHandle(answer)) this.keep(newId, answer);
    return { ok: true, message: `submitted again${newId ? ` as ${newId}` : ''}`, id: newId };
  }

  async close(): Promise<void> {
    for (const parked of this.parked.values()) parked.resolve({ action: 'cancel' });
    this.parked.clear();
    this.followed.clear();
  }

  private inputView(record: TaskRecord, input: InputAnswer): ConsoleInput {
    const params = (input.request.params ?? {}) as { message?: unknown; requestedSchema?: unknown; mode?: unknown };
    return {
      key: input.key,
      method: input.request.method,
      message: typeof params.message === 'string' ? params.message : undefined,
      requestedSchema: params.mode === 'url' ? undefined : params.requestedSchema,
      request: input.request,
      askedAt: input.askedAt,
      answeredAt: input.answeredAt,
      response: input.response,
      sentAt: input.sentAt,
      open:
        input.response === undefined &&
        input.request.method === 'elicitation/create' &&
        params.mode !== 'url' &&
        record.status === 'input_required',
    };
  }

  /** Follows the record here when nobody else does; false when another live process holds it. */
  private async attach(client: TaskClient, record: TaskRecord): Promise<boolean> {
    if (this.followed.has(record.recordId)) return true;
    try {
      this.keep(record.recordId, await client.attach(record.recordId));
      return true;
    } catch (error) {
      if (error instanceof TaskClientError && error.code === 'leased-elsewhere') return false;
      throw error;
    }
  }

  private keep(recordId: string, handle: TaskHandle): void {
    this.followed.set(recordId, handle);
    handle
      .outcome()
      .catch(() => undefined)
      .finally(() => this.followed.delete(recordId));
  }

  private leaseLive(record: TaskRecord): boolean {
    if (record.localState === 'detached') return false;
    return record.leaseHolder !== undefined && (record.leaseExpiresAt ?? 0) > this.ledger.now();
  }

  private park(request: ElicitRequest, context: TaskInputContext): Promise<ElicitResult> {
    return new Promise<ElicitResult>((resolve, reject) => {
      const key = parkKey(context.recordId, context.key);
      this.parked.set(key, { resolve, request });
      context.signal.addEventListener(
        'abort',
        () => {
          if (this.parked.get(key)?.resolve === resolve) this.parked.delete(key);
          reject(context.signal.reason);
        },
        { once: true },
      );
    });
  }

  private async require(id: string): Promise<TaskRecord> {
    const record = await this.ledger.get(id);
    if (!record) throw new ConsoleRequestError(404, `no record ${id} in the ledger ${this.shown}`);
    return record;
  }
}

function parkKey(recordId: string, key: string): string {
  return `${recordId}\0${key}`;
}

function refOf(record: TaskRecord): string {
  return record.taskId ? `task ${record.taskId}` : `record ${record.recordId}`;
}

/** An action on a record closed out (or that never held a task) is refused: there is nothing to act on. */
function refuseUnlessOpen(record: TaskRecord, action: string): void {
  if (!isFollowable(record.localState) || !record.taskId) {
    throw new ConsoleRequestError(409, `${refOf(record)} is closed (${recordStatus(record)}): nothing to ${action}`);
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The answer as the elicitation result it must be: accept (with content that fits the form's schema, checked by the
 * SDK's own JSON Schema validator), decline or cancel. A bad answer is refused, naming what is wrong, and nothing is
 * stored.
 */
async function checkedAnswer(input: InputAnswer, response: unknown): Promise<ElicitResult> {
  if (input.request.method !== 'elicitation/create') {
    throw new ConsoleRequestError(
      400,
      `input ${input.key} is a ${input.request.method} request: the console answers forms only`,
    );
  }
  const { action, content } = (response ?? {}) as { action?: unknown; content?: unknown };
  if (action === 'decline' || action === 'cancel') return { action };
  if (action !== 'accept') throw new ConsoleRequestError(400, 'action must be accept, decline or cancel');
  const params = (input.request.params ?? {}) as { mode?: unknown; requestedSchema?: Record<string, unknown> };
  if (params.mode === 'url') return { action };
  if (typeof content !== 'object' || content === null || Array.isArray(content)) {
    throw new ConsoleRequestError(400, 'content must be an object of the form’s fields');
  }
  const { AjvJsonSchemaValidator } = await import('@modelcontextprotocol/client/validators/ajv');
  const check = new AjvJsonSchemaValidator().getValidator({ ...params.requestedSchema, type: 'object' } as never)(
    content,
  );
  if (!check.valid) {
    throw new ConsoleRequestError(
      400,
      `the answer does not fit the form: ${(check.errorMessage ?? 'invalid').replace(/\bdata\//g, '')}`,
    );
  }
  return { action, content: content as ElicitResult['content'] & object };
}
