/**
 * A server store in the console: every caller's tasks, for the operator (the store's listing,
 * src/server/store/listing; never served over MCP), each with its inputs, durable steps and checkpoint, attempts and
 * lease holder. The operator's one action is a cancel: recorded in the store as `tasks/cancel` records it, and heard
 * by the instance running the task (its lease loop reads it back), wherever that runs.
 */
import type { TaskStatus } from '../protocol/index.js';
import { OPEN_STATUSES, TASK_STATUSES } from '../protocol/status.js';
import { parseTraceparent } from '../protocol/traceContext.js';
import type { TaskListQuery } from '../server/store/listing/query.js';
import type { TaskStore } from '../server/store/taskStore.js';
import { listedIds, refusedQuery } from './sourceListing.js';
import type {
  ConsoleActionResult,
  ConsoleDetail,
  ConsoleList,
  ConsoleQuery,
  ConsoleSource,
  ConsoleStatus,
  ConsoleTimelineEntry,
} from './view.js';
import { ConsoleRequestError } from './view.js';

export class StoreSource implements ConsoleSource {
  readonly kind = 'store';
  readonly statuses: readonly ConsoleStatus[] = TASK_STATUSES;

  constructor(
    private readonly store: TaskStore,
    readonly shown: string,
  ) {}

  async list(query: ConsoleQuery): Promise<ConsoleList> {
    const { listTasks, countTasks } = this.store;
    if (!listTasks || !countTasks)
      throw new ConsoleRequestError(501, `the store at ${this.shown} cannot list its tasks`);
    const statuses = query.status?.filter((status): status is TaskStatus => this.statuses.includes(status));
    const now = this.now();
    // a status no task can be in (a client's `expired`, say) selects nothing
    if (statuses !== undefined && statuses.length === 0) {
      return { source: this.kind, rows: [], counts: {}, nextCursor: undefined, now };
    }
    const listing: TaskListQuery = {
      status: statuses,
      toolName: query.tool,
      search: query.search,
      cursor: query.cursor,
      limit: query.limit,
    };
    const [page, counts] = await Promise.all([
      listTasks.call(this.store, listing),
      countTasks.call(this.store, { ...listing, status: undefined }),
    ]).catch(refusedQuery);
    return {
      source: this.kind,
      rows: page.tasks.map((task) => ({
        id: task.taskId,
        taskId: task.taskId,
        toolName: task.toolName,
        status: task.status,
        statusMessage: task.statusMessage,
        at: task.createdAt,
        principal: task.principal,
        cancelRequested: task.cancelRequested,
      })),
      counts,
      nextCursor: page.nextCursor,
      now,
    };
  }

  async detail(id: string): Promise<ConsoleDetail | undefined> {
    const task = await this.store.get(id);
    if (!task) return undefined;
    const { steps, checkpoint } = await this.store.readSteps(id);
    const facts: Array<[string, string]> = [
      ['principal', task.principal],
      ['attempt', String(task.attempt)],
    ];
    if (task.leaseHolder && OPEN_STATUSES.includes(task.status)) {
      const until = task.leaseExpiresAt === undefined ? '' : ` until ${new Date(task.leaseExpiresAt).toISOString()}`;
      facts.push(['lease holder', `${task.leaseHolder}${until}`]);
    }
    if (task.idempotencyKey) facts.push(['idempotency key', task.idempotencyKey]);
    facts.push(['ttl', task.ttlMs === null ? 'unlimited' : `${task.ttlMs} ms`]);
    facts.push(['poll interval', `${task.pollIntervalMs} ms`]);
    facts.push(['resumable', task.resumable ? 'yes' : 'no']);
    if (task.cancelRequested) facts.push(['cancel', 'requested']);
    // the store keeps no history: the timeline is what its times say
    const timeline: ConsoleTimelineEntry[] = [{ at: task.createdAt, what: 'created', detail: undefined }];
    for (const input of task.inputs) {
      timeline.push({ at: input.requestedAt, what: 'input_required', detail: `asked ${input.key}` });
      if (input.answeredAt !== undefined) {
        timeline.push({ at: input.answeredAt, what: 'answered', detail: input.key });
      }
    }
    for (const step of steps) timeline.push({ at: step.committedAt, what: 'step', detail: step.name });
    timeline.push({ at: task.lastUpdatedAt, what: task.status, detail: task.statusMessage });
    timeline.sort((a, b) => a.at - b.at);
    return {
      source: this.kind,
      id: task.taskId,
      taskId: task.taskId,
      toolName: task.toolName,
      status: task.status,
      statusMessage: task.statusMessage,
      arguments: task.arguments,
      facts,
      timeline,
      inputs: task.inputs.map((input) => {
        const params = (input.request.params ?? {}) as { message?: unknown; requestedSchema?: unknown };
        return {
          key: input.key,
          method: input.request.method,
          message: typeof params.message === 'string' ? params.message : undefined,
          requestedSchema: params.requestedSchema,
          request: input.request,
          askedAt: input.requestedAt,
          answeredAt: input.answeredAt,
          response: input.response,
          sentAt: undefined,
          // the caller answers its own task's inputs (tasks/update), not the operator
          open: false,
        };
      }),
      steps: steps.map((step) => ({ name: step.name, result: step.result, committedAt: step.committedAt })),
      checkpoint,
      result: task.result,
      error: task.error,
      traceId: parseTraceparent(task.traceContext?.traceparent)?.traceId,
      actions: {
        answer: false,
        cancel: OPEN_STATUSES.includes(task.status) && !task.cancelRequested,
        resubmit: false,
        follow: false,
      },
      now: this.now(),
    };
  }

  async cancel(id: string): Promise<ConsoleActionResult> {
    const task = await this.store.get(id);
    if (!task) throw new ConsoleRequestError(404, `no task ${id} in the store ${this.shown}`);
    if (!(await this.store.requestCancel(id, this.now()))) {
      throw new ConsoleRequestError(409, `task ${id} is ${task.status}: nothing to cancel`);
    }
    return { ok: true, message: `cancel of task ${id} recorded: the instance running it stops it when it notices` };
  }

  async cancelAll(query: ConsoleQuery, max: number): Promise<ConsoleActionResult> {
    const open = (query.status ?? OPEN_STATUSES).filter((status) => OPEN_STATUSES.includes(status as TaskStatus));
    if (open.length === 0) return { ok: true, message: 'no open task matches: nothing to cancel' };
    const ids = await listedIds((page) => this.list(page), { ...query, status: open }, max);
    let cancelled = 0;
    for (const id of ids) if (await this.store.requestCancel(id, this.now())) cancelled += 1;
    return { ok: true, message: `${cancelled} of ${ids.length} cancelled` };
  }

  async close(): Promise<void> {}

  private now(): number {
    return this.store.now?.() ?? Date.now();
  }
}
