/**
 * Push: `notifications/tasks` on `subscriptions/listen` streams (SEP-2663, "Task Status Notifications"; the stream is
 * MCP 2026-07-28, basic/patterns/subscriptions). The SDK's listen router carries only its fixed event kinds
 * (docs/../sdk-v2 notes), so the stream is served here, as web-standard SSE, and http.ts routes the requests to it.
 *
 * Push is an accelerator, polling the safety net (docs/DESIGN.md, "Rules learned in the field", 7): a change is only a
 * hint to read the task again; what goes out is always a fresh read, built by the function `tasks/get` answers with.
 * The hints come from this instance's writes and, on PostgreSQL, from every instance's NOTIFY; a periodic read of the
 * subscribed ids catches a hint that was lost. Nothing about a subscription outlives its stream.
 */
import {
  SUBSCRIPTION_ID_META_KEY,
  SUBSCRIPTIONS_LISTEN_METHOD,
  TASK_STATUS_NOTIFICATION_METHOD,
  TASKS_EXTENSION_ID,
} from '../protocol/constants.js';
import type { DetailedTask } from '../protocol/index.js';
import { ErrorCode, isTerminalStatus, MAX_TASK_ID_LENGTH } from '../protocol/index.js';
import { unstorableField } from '../protocol/storableText.js';
import type { TaskLimits } from './limits.js';
import type { StoredTask } from './store/taskStore.js';
import type { TaskReads } from './taskReads.js';

/** How push streams behave; every field has a default. */
export interface TaskPushOptions {
  /**
   * Bytes a stream may hold for a consumer that does not read. Past it the stream is cut (no graceful result: the
   * client sees a dropped transport and reconnects), so a slow or dead consumer never grows the heap. Default 1 MiB.
   */
  bufferBytes?: number;
  /**
   * How often the stored version of every subscribed task is compared with the last one sent, to catch a change whose
   * hint was lost (only changed tasks are read in full). Default 5000 ms.
   */
  checkIntervalMs?: number;
  /** SSE comment frames this often keep an idle stream open through proxies, as the SDK's streams do. Default 15 s. */
  keepAliveMs?: number;
}

/** The `params` of a `subscriptions/listen` request, as far as push reads them. */
export interface ListenRequest {
  id: string | number;
  params: { notifications?: { taskIds?: unknown }; _meta?: Record<string, unknown> };
}

/** The message as a `subscriptions/listen` request that asks for task notifications, or undefined. */
export function taskListenOf(message: unknown): ListenRequest | undefined {
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return undefined;
  const { method, id, params } = message as { method?: unknown; id?: unknown; params?: unknown };
  if (method !== SUBSCRIPTIONS_LISTEN_METHOD || (typeof id !== 'string' && typeof id !== 'number')) return undefined;
  const notifications = (params as { notifications?: unknown } | undefined)?.notifications;
  if (typeof notifications !== 'object' || notifications === null || !('taskIds' in notifications)) return undefined;
  return { id, params: params as ListenRequest['params'] };
}

/** Ends the HTTP exchange a stream is served on at once (the socket too), when the serving layer can. */
export type CutConnection = () => void;

const CHECK_PAGE = 500;
/**
 * Tasks read in full at once (a stream's opening states, the periodic check's changed tasks): with results of up to
 * `maxResultBytes` each, what a read holds stays a few of them, whatever a listen asked for.
 */
const FULL_READ_PAGE = 16;
const encoder = new TextEncoder();
const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};

interface PrincipalUsage {
  streams: number;
  taskIds: number;
}

export class TaskPush {
  private readonly streams = new Set<PushStream>();
  /** Subscribed task id -> the streams that follow it (all of its owner's). */
  private readonly byTask = new Map<string, Set<PushStream>>();
  private readonly usage = new Map<string, PrincipalUsage>();
  /**
   * The version (status and lastUpdatedAt, see `versionOf`) of the last state of each followed task sent to all of its
   * streams: the periodic check reads a task in full only when its stored version differs.
   */
  private readonly versions = new Map<string, string>();
  /** Tasks being read for their streams; true when another hint came meanwhile (read again after). */
  private readonly reading = new Map<string, boolean>();
  private readonly bufferBytes: number;
  private readonly checkIntervalMs: number;
  private readonly keepAliveMs: number;
  private unsubscribe: (() => void) | undefined;
  private checkTimer: NodeJS.Timeout | undefined;
  private checking = false;
  private closed = false;
  /** Full reads for streams' backlogs go one page at a time across all streams: what they hold at once is bounded. */
  private filling: Promise<void> = Promise.resolve();

  constructor(
    private readonly tasks: TaskReads,
    private readonly limits: TaskLimits,
    options: TaskPushOptions,
    private readonly report: (error: unknown) => void,
  ) {
    this.bufferBytes = positive('push.bufferBytes', options.bufferBytes ?? 1024 * 1024);
    this.checkIntervalMs = positive('push.checkIntervalMs', options.checkIntervalMs ?? 5000);
    this.keepAliveMs = options.keepAliveMs ?? 15_000;
  }

  /** How many streams are open, and how many task ids they follow (for tests and the benchmark). */
  stats(): { streams: number; taskIds: number } {
    return { streams: this.streams.size, taskIds: this.byTask.size };
  }

  /**
   * Serves one `subscriptions/listen` request that asks for `notifications.taskIds`: a JSON-RPC error, or an SSE
   * stream that opens with the acknowledgement of the ids agreed to (the caller's own tasks), then the current state
   * of each, then every change. `signal` ends it when the client goes.
   */
  async listen(
    request: ListenRequest,
    principal: string,
    declaresTasks: boolean,
    signal: AbortSignal | undefined,
    serverInfo: { name: string; version: string },
    cut?: CutConnection,
  ): Promise<Response> {
    if (!declaresTasks) {
      // spec (SEP-2663): MUST return -32021 naming the extension when task notifications are asked without it
      return rpcError(
        request.id,
        ErrorCode.MissingRequiredClientCapability,
        'subscriptions/listen with notifications.taskIds must declare the io.modelcontextprotocol/tasks extension in its client capabilities',
        { requiredCapabilities: { extensions: { [TASKS_EXTENSION_ID]: {} } } },
        400,
      );
    }
    const requested = taskIdsOf(request.params.notifications?.taskIds);
    if (typeof requested === 'string') return rpcError(request.id, ErrorCode.InvalidParams, requested);
    if (this.closed) return rpcError(request.id, ErrorCode.InternalError, 'Server shutting down');
    // a list no caller may ever follow on this server is the request's mistake (-32602); one refused for what the
    // caller follows already is a limit to wait out (-32603, below)
    if (requested.length > this.limits.maxSubscribedTasksPerPrincipal) {
      return rpcError(
        request.id,
        ErrorCode.InvalidParams,
        `Invalid params: notifications.taskIds lists ${requested.length} distinct task ids, over this server's limit of ${this.limits.maxSubscribedTasksPerPrincipal} per caller (maxSubscribedTasksPerPrincipal); subscribe to at most that many and poll the others with tasks/get`,
        { limit: 'maxSubscribedTasksPerPrincipal', max: this.limits.maxSubscribedTasksPerPrincipal },
      );
    }
    const usage = this.usage.get(principal) ?? { streams: 0, taskIds: 0 };
    if (usage.streams >= this.limits.maxListenStreamsPerPrincipal) {
      return rpcError(
        request.id,
        ErrorCode.InternalError,
        `Too many subscription streams: this caller already has ${usage.streams} subscriptions/listen streams open with task notifications, this server's limit (maxListenStreamsPerPrincipal); follow every task on one stream, or close one first`,
        { limit: 'maxListenStreamsPerPrincipal', max: this.limits.maxListenStreamsPerPrincipal },
      );
    }
    if (usage.taskIds + requested.length > this.limits.maxSubscribedTasksPerPrincipal) {
      return rpcError(
        request.id,
        ErrorCode.InternalError,
        `Too many subscribed tasks: this caller follows ${usage.taskIds} tasks and asked for ${requested.length} more, over this server's limit of ${this.limits.maxSubscribedTasksPerPrincipal} (maxSubscribedTasksPerPrincipal); subscribe to fewer and poll the others with tasks/get`,
        { limit: 'maxSubscribedTasksPerPrincipal', max: this.limits.maxSubscribedTasksPerPrincipal },
      );
    }

    // the stream counts, and its ids are followed, before the first read: a change from now on is not missed (it is
    // read again once the acknowledgement is out)
    const stream = new PushStream(this, principal, request.id, serverInfo, this.bufferBytes, cut);
    usage.streams++;
    usage.taskIds += requested.length;
    this.usage.set(principal, usage);
    this.streams.add(stream);
    for (const taskId of requested) this.follow(stream, taskId);

    // whose each task is, without what it holds: a listen may name thousands of tasks of megabytes each
    const owned = new Set<string>();
    try {
      for (let i = 0; i < requested.length; i += CHECK_PAGE) {
        for (const owner of await this.tasks.readOwners(requested.slice(i, i + CHECK_PAGE))) {
          if (owner.principal === principal) owned.add(owner.taskId);
        }
      }
    } catch (error) {
      this.drop(stream);
      const message = error instanceof Error ? error.message : String(error);
      return rpcError(request.id, ErrorCode.InternalError, message);
    }
    // another principal's task and an unknown id alike: silently not agreed (spec, Security: auth binding)
    const agreed = requested.filter((taskId) => owned.has(taskId));
    for (const taskId of requested) if (!owned.has(taskId)) this.unfollow(stream, taskId);

    stream.send({
      jsonrpc: '2.0',
      method: 'notifications/subscriptions/acknowledged',
      params: { _meta: { [SUBSCRIPTION_ID_META_KEY]: request.id }, notifications: { taskIds: agreed } },
    });
    if (agreed.length === 0) {
      // nothing to follow: the subscription ends gracefully at once, as the SDK's router ends an empty one
      stream.end();
      this.drop(stream);
      return stream.response();
    }
    // the state of each as it is when its turn comes, read as the consumer makes room for it (`fill`): so a change
    // made before the stream opened is not lost, and a consumer that does not read costs its buffer, not its tasks
    for (const taskId of agreed) stream.backlog.add(taskId);
    stream.opened();
    if (signal?.aborted) this.cancel(stream);
    else signal?.addEventListener('abort', () => this.cancel(stream), { once: true });
    if (this.keepAliveMs > 0) stream.keepAlive(this.keepAliveMs);
    this.fill(stream);
    this.startChecking();
    return stream.response();
  }

  /**
   * Sends `stream` the states it is owed (its backlog), while its consumer has room for them, a page at a time and one
   * page at a time across all streams. A state that does not fit waits, unread, until the consumer reads (PushStream
   * calls this again); one that changes meanwhile is read then, fresh.
   */
  fill(stream: PushStream): void {
    if (stream.filling || stream.backlog.size === 0 || !stream.hasRoom() || !this.streams.has(stream)) return;
    stream.filling = true;
    const run = this.filling.then(() => this.fillPages(stream));
    this.filling = run.catch(() => undefined);
    run.then(
      () => {
        stream.filling = false;
        // the consumer may have read while the last page was being sent
        this.fill(stream);
      },
      (error: unknown) => {
        // a store failure: the periodic check tries again
        stream.filling = false;
        this.report(error);
      },
    );
  }

  private async fillPages(stream: PushStream): Promise<void> {
    while (stream.backlog.size > 0 && stream.hasRoom() && this.streams.has(stream) && !this.closed) {
      const page = [...stream.backlog].slice(0, stream.pageForRoom(FULL_READ_PAGE));
      for (const taskId of page) stream.reading.add(taskId);
      let rows: Map<string, StoredTask>;
      try {
        rows = new Map((await this.tasks.readTasks(page)).map((row) => [row.taskId, row]));
      } finally {
        for (const taskId of page) stream.reading.delete(taskId);
      }
      for (const taskId of page) {
        if (!stream.taskIds.has(taskId)) {
          stream.backlog.delete(taskId);
          continue;
        }
        const row = rows.get(taskId);
        if (!row) {
          // purged since the listen: nothing more to say about it
          stream.backlog.delete(taskId);
          this.unfollow(stream, taskId);
          continue;
        }
        let answer: DetailedTask;
        try {
          answer = await this.tasks.answerOf(row, stream.principal);
        } catch (error) {
          if ((error as { code?: unknown }).code !== ErrorCode.InvalidParams) throw error;
          stream.backlog.delete(taskId);
          this.unfollow(stream, taskId);
          continue;
        }
        // no room for it now: it stays owed, and is read again once the consumer read what waits
        if (!this.deliverTo(stream, answer, true)) return;
        stream.backlog.delete(taskId);
        // a task other streams follow keeps the version they were sent: if this read is newer, the check sends it to them
        if (this.byTask.get(taskId)?.size === 1) this.versions.set(taskId, versionOf(answer));
        // a change hinted while this read was under way may be newer than what it read
        if (stream.dirty.delete(taskId)) this.hint(taskId);
      }
    }
  }

  /** Starts following the server's change hints. */
  start(): void {
    this.unsubscribe ??= this.tasks.onTaskChange((taskId) => this.hint(taskId));
  }

  /**
   * Ends every stream gracefully (the spec's completion result, then the end of the stream) and waits, at most
   * `graceMs`, for consumers to read it.
   */
  async close(graceMs = 1000): Promise<void> {
    this.closed = true;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.checkTimer) clearInterval(this.checkTimer);
    const ending = [...this.streams].map((stream) => {
      stream.end();
      this.drop(stream);
      return stream.drained;
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(ending), new Promise((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
  }

  /** A stream's consumer went away or fell too far behind: it is forgotten, without a result. */
  cancel(stream: PushStream): void {
    stream.cut();
    this.drop(stream);
  }

  /** The task may have changed: read it once for all its streams (hints that come during the read coalesce). */
  private hint(taskId: string): void {
    if (!this.byTask.has(taskId)) return;
    if (this.reading.has(taskId)) {
      this.reading.set(taskId, true);
      return;
    }
    this.reading.set(taskId, false);
    void this.readAndDeliver(taskId).finally(() => {
      const again = this.reading.get(taskId);
      this.reading.delete(taskId);
      if (again) this.hint(taskId);
    });
  }

  /**
   * Reads the task as it is stored, whoever follows it: the row says whose it is, and only that principal's streams
   * hear of it. A stream of another principal (one whose listen named it and is still being checked) neither decides
   * how it is read nor what becomes of it for the others.
   */
  private async readAndDeliver(taskId: string): Promise<void> {
    if (!this.byTask.has(taskId)) return;
    let row: StoredTask | undefined;
    try {
      [row] = await this.tasks.readTasks([taskId]);
    } catch (error) {
      // a store failure is left to the next check
      this.report(error);
      return;
    }
    // purged: nothing more to say about it
    if (!row) this.forget(taskId);
    else await this.answerAndDeliver(row);
  }

  private deliver(answer: DetailedTask, principal: string): void {
    const { taskId } = answer;
    if (this.byTask.has(taskId)) this.versions.set(taskId, versionOf(answer));
    for (const stream of [...(this.byTask.get(taskId) ?? [])]) {
      if (stream.principal !== principal) continue;
      if (stream.opening || stream.backlog.has(taskId)) {
        // owed already: read fresh when its turn comes, unless that read is under way now
        if (stream.reading.has(taskId)) stream.dirty.add(taskId);
        continue;
      }
      this.deliverTo(stream, answer);
    }
  }

  /**
   * Sends `answer` on `stream` unless it said the same already; a terminal task is not followed further. With
   * `whenRoom`, a state that would not fit is not sent (false), instead of costing the consumer its stream.
   */
  private deliverTo(stream: PushStream, answer: DetailedTask, whenRoom = false): boolean {
    const signature = signatureOf(answer);
    if (stream.sent.get(answer.taskId) !== signature) {
      const sent = stream.send(
        {
          jsonrpc: '2.0',
          method: TASK_STATUS_NOTIFICATION_METHOD,
          params: { ...answer, _meta: { [SUBSCRIPTION_ID_META_KEY]: stream.subscriptionId } },
        },
        whenRoom,
      );
      if (!sent) return false;
      stream.sent.set(answer.taskId, signature);
    }
    // a terminal task never changes again (docs/DESIGN.md, "The task's life on the server", 4)
    if (isTerminalStatus(answer.status)) this.unfollow(stream, answer.taskId);
    return true;
  }

  /** True when every stream following the task is owed its state already (the check need not read it for them). */
  private owedToAll(taskId: string): boolean {
    for (const stream of this.byTask.get(taskId) ?? []) if (!stream.backlog.has(taskId)) return false;
    return true;
  }

  /**
   * Compares the stored version of every followed task with the one last sent, a page at a time (one light statement
   * each), and reads in full only the tasks that changed: the net under lost hints, whose cost while nothing changes
   * does not grow with what the tasks hold (docs/DESIGN.md, "Rules learned in the field", 8).
   */
  private startChecking(): void {
    if (this.checkTimer || this.closed) return;
    this.checkTimer = setInterval(() => void this.check(), this.checkIntervalMs);
    this.checkTimer.unref();
  }

  private async check(): Promise<void> {
    if (this.checking) return;
    if (this.streams.size === 0) {
      clearInterval(this.checkTimer);
      this.checkTimer = undefined;
      return;
    }
    this.checking = true;
    try {
      const taskIds = [...this.byTask.keys()];
      for (let i = 0; i < taskIds.length && !this.closed; i += CHECK_PAGE) {
        const page = taskIds.slice(i, i + CHECK_PAGE);
        const stored = new Map((await this.tasks.readVersions(page)).map((version) => [version.taskId, version]));
        const changed: string[] = [];
        for (const taskId of page) {
          const version = stored.get(taskId);
          if (!version) this.forget(taskId);
          else if (!this.byTask.has(taskId) || this.reading.has(taskId) || this.owedToAll(taskId)) continue;
          // overdue: a full read expires it (answerOf), as tasks/get would
          else if (version.overdue || this.versions.get(taskId) !== versionOf(version)) changed.push(taskId);
        }
        for (let j = 0; j < changed.length; j += FULL_READ_PAGE) {
          const slice = changed.slice(j, j + FULL_READ_PAGE);
          const rows = new Map((await this.tasks.readTasks(slice)).map((row) => [row.taskId, row]));
          for (const taskId of slice) {
            const row = rows.get(taskId);
            if (!row) this.forget(taskId);
            else if (this.byTask.has(taskId)) await this.answerAndDeliver(row);
          }
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      // owed states a store failure held up
      for (const stream of this.streams) this.fill(stream);
    } catch (error) {
      this.report(error);
    } finally {
      this.checking = false;
    }
  }

  private async answerAndDeliver(row: StoredTask): Promise<void> {
    try {
      this.deliver(await this.tasks.answerOf(row, row.principal), row.principal);
    } catch (error) {
      // expired and purged between the read and the answer: nothing more to say; anything else waits for the next check
      if ((error as { code?: unknown }).code === ErrorCode.InvalidParams) this.forget(row.taskId);
      else this.report(error);
    }
  }

  private follow(stream: PushStream, taskId: string): void {
    stream.taskIds.add(taskId);
    let streams = this.byTask.get(taskId);
    if (!streams) this.byTask.set(taskId, (streams = new Set()));
    streams.add(stream);
  }

  private unfollow(stream: PushStream, taskId: string): void {
    if (!stream.taskIds.delete(taskId)) return;
    stream.sent.delete(taskId);
    stream.backlog.delete(taskId);
    stream.dirty.delete(taskId);
    const usage = this.usage.get(stream.principal);
    if (usage) usage.taskIds--;
    const streams = this.byTask.get(taskId);
    streams?.delete(stream);
    if (streams?.size === 0) {
      this.byTask.delete(taskId);
      this.versions.delete(taskId);
    }
  }

  private forget(taskId: string): void {
    for (const stream of [...(this.byTask.get(taskId) ?? [])]) this.unfollow(stream, taskId);
  }

  /** Forgets the stream: its ids, its place in its principal's counts. */
  private drop(stream: PushStream): void {
    if (!this.streams.delete(stream)) return;
    for (const taskId of [...stream.taskIds]) this.unfollow(stream, taskId);
    const usage = this.usage.get(stream.principal);
    if (usage && --usage.streams === 0) this.usage.delete(stream.principal);
  }
}

/**
 * One SSE stream, pulled by the HTTP layer: frames wait in a queue of at most `bufferBytes` until the consumer reads
 * them, so a consumer that stops reading costs a bounded amount of memory and then its stream.
 */
class PushStream {
  readonly taskIds = new Set<string>();
  /** What each task's last notification said (signatureOf), so a repeated read sends nothing. */
  readonly sent = new Map<string, string>();
  /** Tasks whose current state the stream owes its consumer (all it agreed to, at first), in order. */
  readonly backlog = new Set<string>();
  /** Backlog tasks being read for the stream now. */
  readonly reading = new Set<string>();
  /** Backlog tasks hinted while being read: read again once sent. */
  readonly dirty = new Set<string>();
  /** Whether `TaskPush.fill` is sending the backlog. */
  filling = false;
  opening = true;
  /** Resolves when the consumer has read the end of the stream, or the stream was cut. */
  readonly drained: Promise<void>;
  private readonly queue: Uint8Array[] = [];
  private queuedBytes = 0;
  /** The size of the last message queued, to size the next backlog read. */
  private lastFrameBytes = 0;
  private ending = false;
  private dead = false;
  private wake: (() => void) | undefined;
  private keepAliveTimer: NodeJS.Timeout | undefined;
  private resolveDrained!: () => void;
  private readonly readable: ReadableStream<Uint8Array>;

  constructor(
    private readonly push: TaskPush,
    readonly principal: string,
    readonly subscriptionId: string | number,
    private readonly serverInfo: { name: string; version: string },
    private readonly bufferBytes: number,
    private readonly cutConnection: CutConnection | undefined,
  ) {
    this.drained = new Promise((resolve) => (this.resolveDrained = resolve));
    this.readable = new ReadableStream<Uint8Array>(
      {
        pull: (controller) => this.pull(controller),
        cancel: () => this.push.cancel(this),
      },
      // nothing is buffered by the stream itself: every byte waits in `queue`, where it is counted
      { highWaterMark: 0 },
    );
  }

  response(): Response {
    return new Response(this.readable, { status: 200, headers: SSE_HEADERS });
  }

  opened(): void {
    this.opening = false;
  }

  /** Whether the consumer has read enough for more of the backlog to be queued. */
  hasRoom(): boolean {
    return !this.dead && !this.ending && this.queuedBytes < this.bufferBytes;
  }

  /** How many backlog states to read at once: as many as the room left holds, by the size of the last ones, at most `max`. */
  pageForRoom(max: number): number {
    if (this.lastFrameBytes === 0) return max;
    return Math.max(1, Math.min(max, Math.floor((this.bufferBytes - this.queuedBytes) / this.lastFrameBytes)));
  }

  /**
   * Queues one JSON-RPC message; a consumer that let the queue pass `bufferBytes` loses its stream. With `whenRoom`,
   * a message that would pass it is not queued (false), and the stream stays.
   */
  send(message: object, whenRoom = false): boolean {
    return this.write(`event: message\ndata: ${JSON.stringify(message)}\n\n`, whenRoom);
  }

  keepAlive(everyMs: number): void {
    this.keepAliveTimer = setInterval(() => this.write(': keepalive\n\n'), everyMs);
    this.keepAliveTimer.unref();
  }

  /** The server ends the subscription: the completion result (spec: "Graceful Closure"), then the end. */
  end(): void {
    if (this.ending || this.dead) return;
    this.send({
      jsonrpc: '2.0',
      id: this.subscriptionId,
      result: {
        resultType: 'complete',
        _meta: {
          [SUBSCRIPTION_ID_META_KEY]: this.subscriptionId,
          'io.modelcontextprotocol/serverInfo': this.serverInfo,
        },
      },
    });
    this.ending = true;
    this.stopKeepAlive();
    this.wake?.();
  }

  /** Ends the stream at once, without a result: the client sees a dropped transport (and may reconnect). */
  cut(): void {
    if (this.dead) return;
    this.dead = true;
    this.queue.length = 0;
    this.queuedBytes = 0;
    this.stopKeepAlive();
    this.wake?.();
    this.cutConnection?.();
    this.resolveDrained();
  }

  private write(frame: string, whenRoom = false): boolean {
    if (this.dead || this.ending) return false;
    const bytes = encoder.encode(frame);
    // a message alone always fits: only a consumer that has not read what came before loses the stream
    if (this.queuedBytes > 0 && this.queuedBytes + bytes.byteLength > this.bufferBytes) {
      if (whenRoom) return false;
      // spec (subscriptions, Cancellation): the server tears the stream down; a consumer this far behind would not
      // read a graceful result either, and its transport dropping tells it to reconnect
      this.push.cancel(this);
      return false;
    }
    this.queue.push(bytes);
    this.queuedBytes += bytes.byteLength;
    this.lastFrameBytes = bytes.byteLength;
    this.wake?.();
    return true;
  }

  private async pull(controller: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    while (this.queue.length === 0 && !this.ending && !this.dead) {
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
    if (this.dead) {
      try {
        controller.error(new Error('subscription stream cut'));
      } catch {
        // already cancelled by the consumer
      }
      return;
    }
    const chunk = this.queue.shift();
    if (chunk) {
      this.queuedBytes -= chunk.byteLength;
      controller.enqueue(chunk);
      // the consumer made room: what the stream still owes it may follow
      if (this.backlog.size > 0) this.push.fill(this);
      return;
    }
    controller.close();
    this.resolveDrained();
  }

  private stopKeepAlive(): void {
    if (this.keepAliveTimer) clearInterval(this.keepAliveTimer);
    this.keepAliveTimer = undefined;
  }
}

/**
 * What the periodic check compares: every write that changes a task's DetailedTask moves its status or lastUpdatedAt
 * (the stores' statements; a change within the millisecond of the last one sent is caught by its own hint).
 */
function versionOf(task: { status: string; lastUpdatedAt: number | string }): string {
  const at = typeof task.lastUpdatedAt === 'number' ? task.lastUpdatedAt : Date.parse(task.lastUpdatedAt);
  return `${task.status}\u0001${at}`;
}

/** What makes two notifications of one task differ, leaving out pollIntervalMs (it moves with the task's age). */
function signatureOf(answer: DetailedTask): string {
  const inputs = answer.status === 'input_required' ? Object.keys(answer.inputRequests).join('\u0000') : '';
  return `${answer.status}\u0001${answer.lastUpdatedAt}\u0001${answer.statusMessage ?? ''}\u0001${inputs}`;
}

/** The requested ids, each once, or why they are not a list of task ids. */
function taskIdsOf(value: unknown): string[] | string {
  if (!Array.isArray(value)) return 'Invalid params: notifications.taskIds must be an array of task ids';
  for (const [i, taskId] of value.entries()) {
    if (typeof taskId !== 'string' || taskId.length === 0 || taskId.length > MAX_TASK_ID_LENGTH) {
      return `Invalid params: notifications.taskIds[${i}] must be a task id (a string of 1 to ${MAX_TASK_ID_LENGTH} characters)`;
    }
    const unstorable = unstorableField(`notifications.taskIds[${i}]`, taskId);
    if (unstorable !== undefined) return `Invalid params: ${unstorable}`;
  }
  return [...new Set(value as string[])];
}

function rpcError(id: string | number, code: number, message: string, data?: unknown, status = 200): Response {
  return Response.json(
    { jsonrpc: '2.0', id, error: { code, message, ...(data !== undefined && { data }) } },
    { status },
  );
}

function positive(name: string, value: number): number {
  if (!(Number.isSafeInteger(value) && value > 0)) throw new RangeError(`${name} must be a positive integer`);
  return value;
}
