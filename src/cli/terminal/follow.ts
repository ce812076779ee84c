/**
 * Following tasks until they close out (docs/REQUIREMENTS.md S5, S7, S10), for `call`, `resume` and `demo`: on a TTY a
 * live line per task (status, status message, elapsed time, next poll), plain lines otherwise, one JSON object per
 * event with `--json`. Ctrl-C detaches (the task goes on and `closeout resume` finds it); it never cancels.
 */
import type { ElicitResult } from '@modelcontextprotocol/client';

import type {
  PushState,
  RecordedError,
  TaskClientEvent,
  TaskHandle,
  TaskInputContext,
  TaskOutcome,
} from '../../client/index.js';
import type { TaskRecord } from '../../client/ledger/index.js';
import { isFollowable } from '../../client/ledger/index.js';
import type { DetachReason } from '../exitCodes.js';
import { EXIT, exitCodeOf } from '../exitCodes.js';
import { onOutputClosed } from './closedOutput.js';
import type { InputHost, PresetAnswer } from './elicitationPrompt.js';
import { promptQueue, showAnswered } from './elicitationPrompt.js';
import type { Output } from './output.js';
import { formatAgo, formatDuration, paintState, resultLines } from './recordView.js';
import { serverLine } from './serverText.js';

/** How one followed task ended in this process. */
export interface CloseOut {
  taskId: string;
  record: TaskRecord;
  /** `lost`: another process took the task over, or this one had to stop; the task itself is still open. */
  outcome: TaskOutcome['kind'] | 'lost';
  detachReason: DetachReason | undefined;
  exitCode: number;
  message: string | undefined;
}

interface Followed {
  handle: TaskHandle;
  endpoint: string;
  record: TaskRecord;
  shownStatus: string | undefined;
  shownMessage: string | undefined;
  shownError: string | undefined;
  detachReason: DetachReason | undefined;
}

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

export class Follower implements InputHost {
  readonly interactive: boolean;
  readonly preset: PresetAnswer | undefined;
  private readonly followed = new Map<string, Followed>();
  private readonly closing: Promise<CloseOut>[] = [];
  private ticker: NodeJS.Timeout | undefined;
  private frame = 0;
  private interrupted = false;
  /** The last way of following shown (push, or polling and why), so each change is one line. */
  private shownPush: string | undefined;
  /** The latest way of following, told while no task was followed here yet. */
  private pendingPush: PushState | undefined;
  private readonly onSigint = () => this.interrupt();
  private readonly now: () => number;
  private offOutputClosed: (() => void) | undefined;

  constructor(
    readonly out: Output,
    /** The ledger's current record (what the scheduler decided since the last observation). */
    private readonly readRecord: (recordId: string) => Promise<TaskRecord | undefined>,
    options: {
      interactive: boolean;
      preset: PresetAnswer | undefined;
      /** The ledger's clock (Ledger.now): the times shown are measured on the clock the ledger's times are on. */
      now: () => number;
    },
  ) {
    this.interactive = options.interactive;
    this.preset = options.preset;
    this.now = options.now;
  }

  /**
   * Ctrl-C (or output that lost its reader) from here on detaches instead of killing the process. Armed before
   * `tools/call` is sent, so an interrupt while the server has not answered yet detaches the handle as soon as it
   * arrives.
   */
  arm(): void {
    process.on('SIGINT', this.onSigint);
    // nobody reads the output any more (`| head -1`): let go as on Ctrl-C, never left "working" under a dead follower
    this.offOutputClosed ??= onOutputClosed(this.onSigint);
  }

  /** Whether Ctrl-C was pressed: a handle that arrives now is detached at once. */
  get wasInterrupted(): boolean {
    return this.interrupted;
  }

  /** Start following a handle; `how` says whether it was just submitted or taken up from the ledger. */
  follow(handle: TaskHandle, endpoint: string, how: 'submitted' | 'resumed'): void {
    if (this.followed.has(handle.recordId)) return;
    const record = handle.lastRecord;
    const entry: Followed = {
      handle,
      endpoint,
      record,
      shownStatus: undefined,
      shownMessage: undefined,
      shownError: undefined,
      detachReason: undefined,
    };
    this.followed.set(handle.recordId, entry);
    this.out.event({
      event: how,
      taskId: handle.taskId,
      recordId: handle.recordId,
      tool: record.toolName,
      endpoint,
      status: record.status ?? null,
      statusMessage: record.statusMessage ?? null,
      pollIntervalMs: record.pollIntervalMs ?? null,
      at: new Date().toISOString(),
    });
    const c = this.out.c;
    const polling =
      record.pollIntervalMs === undefined
        ? ''
        : c.dim(` · server suggests polling every ${formatDuration(record.pollIntervalMs)}`);
    this.out.line(
      `${c.bold(how === 'submitted' ? 'task' : 'resuming task')} ${c.bold(handle.taskId)} ${c.dim(`(${record.toolName} at ${endpoint})`)}${polling}`,
    );
    if (how === 'resumed' && isFollowable(record.localState)) {
      // what the ledger last knew; the first tasks/get follows at once (S7)
      entry.shownStatus = record.status ?? 'submitted';
      entry.shownMessage = record.statusMessage;
      const message = record.statusMessage ? ` ${c.dim('·')} ${serverLine(record.statusMessage)}` : '';
      const seen = formatAgo(record.lastPollAt ?? record.updatedAt, this.now());
      this.out.line(`  ${c.dim('last seen')} ${paintState(entry.shownStatus, c)}${message} ${c.dim(seen)}`);
    } else {
      this.showChange(entry, record);
    }
    handle.onChange((next) => this.showChange(entry, next));
    if (this.pendingPush) this.showPush(this.pendingPush);
    this.closing.push(
      handle.outcome().then(
        (outcome) => this.closeOut(entry, outcome),
        (error: unknown) => this.lost(entry, error),
      ),
    );
    if (this.interrupted) void this.detach(handle.recordId, 'interrupted');
    this.startTicker();
  }

  /** Told about the TaskClient's events (poll failures are shown; the client retries them with backoff). */
  onClientEvent(event: TaskClientEvent): void {
    if (event.type === 'unrecorded') {
      // the task exists on the server: its id is on the terminal before the ledger can hold it (docs/DESIGN.md rule 10)
      this.out.event({
        event: 'unrecorded',
        taskId: event.taskId,
        recordId: event.recordId,
        message: event.error.message,
      });
      this.out.aside(
        this.out.ce.yellow(
          `closeout: the server created task ${serverLine(event.taskId)}; ${serverLine(event.error.message)}: retrying until it is recorded`,
        ),
      );
      return;
    }
    if (event.type === 'push') {
      this.showPush(event.state);
      return;
    }
    if (event.type !== 'error') return;
    const entry = this.followed.get(event.recordId);
    if (entry) this.showError(entry, event.error);
  }

  /** Wait until every followed task has closed out or been let go. */
  async done(): Promise<CloseOut[]> {
    const results: CloseOut[] = [];
    // tasks may be added while waiting: wait until no new one came
    while (results.length < this.closing.length) {
      results.push(...(await Promise.all(this.closing.slice(results.length))));
    }
    this.stop();
    return results;
  }

  /** Stop drawing and give Ctrl-C back. */
  stop(): void {
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = undefined;
    this.out.stopLive();
    process.off('SIGINT', this.onSigint);
    this.offOutputClosed?.();
    this.offOutputClosed = undefined;
  }

  /** Ctrl-C: let go of every task; a second Ctrl-C exits at once, once the ledger writes already asked for commit. */
  interrupt(): void {
    if (this.interrupted) {
      this.out.stopLive();
      // the ledger commits the writes of a turn at its end (SqliteGroupCommit): a taskId or a close-out that arrived
      // just before the signal is in that group, and an immediate queued after it runs after it
      setImmediate(() => process.exit(EXIT.interrupted));
      return;
    }
    this.interrupted = true;
    for (const recordId of this.followed.keys()) void this.detach(recordId, 'interrupted');
  }

  needsInput(recordId: string, why: string): void {
    const entry = this.followed.get(recordId);
    if (!entry || entry.detachReason) return;
    this.out.aside(
      this.out.ce.yellow(`closeout: task ${entry.handle.taskId} needs input this process cannot give: ${why}`),
    );
    void this.detach(recordId, 'needs-input');
  }

  readonly exclusive = promptQueue();

  answered(context: TaskInputContext, result: ElicitResult, how: 'prompt' | 'flags'): void {
    showAnswered(this.out, context, result, how);
  }

  private async detach(recordId: string, reason: DetachReason): Promise<void> {
    const entry = this.followed.get(recordId);
    if (!entry || entry.detachReason) return;
    entry.detachReason = reason;
    await entry.handle.detach().catch(() => undefined);
  }

  private showChange(entry: Followed, record: TaskRecord): void {
    entry.record = record;
    const status = record.status ?? 'submitted';
    const message = record.statusMessage;
    if (status === entry.shownStatus && message === entry.shownMessage) return;
    entry.shownStatus = status;
    entry.shownMessage = message;
    const elapsedMs = this.now() - record.submittedAt;
    if (record.localState === 'terminal' || record.localState === 'expired') return; // the close-out says it
    this.out.event({
      event: 'status',
      taskId: entry.handle.taskId,
      status,
      statusMessage: message ?? null,
      elapsedMs,
      at: new Date().toISOString(),
    });
    if (this.out.live) {
      this.draw();
      return;
    }
    const c = this.out.c;
    this.out.line(
      `  ${c.dim(`[${formatDuration(elapsedMs).padStart(6)}]`)}${this.prefix(entry)} ${paintState(status, c)}${message ? ` ${c.dim('·')} ${serverLine(message)}` : ''}`,
    );
  }

  /** One short line when the way tasks are followed changes: push (docs/client.md, "Push") or polling, and why. */
  private showPush(state: PushState): void {
    // the passing states (a stream being opened, nothing open) are not news
    if (state.mode === 'polling' && (state.reason === 'opening a stream' || state.reason === 'no open task')) return;
    // told only while a task is still followed here: nothing is printed after a task's close-out line
    const open = [...this.followed.values()].filter((entry) => entry.handle.localState === 'tracking');
    // the stream may be up before the call's handle reaches this follower: shown when it does
    this.pendingPush = open.length === 0 ? state : undefined;
    if (open.length === 0) return;
    const shown = state.mode === 'push' ? 'push' : `polling: ${state.reason}`;
    if (shown === this.shownPush) return;
    this.shownPush = shown;
    // one JSON event per followed task: every event of `call --json` names its task
    for (const entry of open) {
      this.out.event({
        event: 'following',
        taskId: entry.handle.taskId,
        by: state.mode,
        ...(state.mode === 'push'
          ? { tasks: state.tasks, safetyPollMs: state.safetyPollMs }
          : { reason: state.reason }),
        at: new Date().toISOString(),
      });
    }
    const c = this.out.c;
    this.out.line(
      state.mode === 'push'
        ? c.dim(
            `  following by push (subscriptions/listen), polling every ${formatDuration(state.safetyPollMs)} as a safety net`,
          )
        : c.dim(`  following by polling (${serverLine(state.reason)})`),
    );
  }

  private showError(entry: Followed, error: RecordedError): void {
    if (error.message === entry.shownError) return;
    entry.shownError = error.message;
    this.out.event({
      event: 'poll-error',
      taskId: entry.handle.taskId,
      kind: error.kind,
      message: error.message,
      at: new Date(error.at).toISOString(),
    });
    const hint = error.kind === 'transport' ? '; retrying (a failed poll is not a failed task)' : '';
    this.out.line(`  ${this.out.c.yellow('!')}${this.prefix(entry)} ${serverLine(error.message)}${hint}`);
  }

  private prefix(entry: Followed): string {
    return this.followed.size > 1 ? ` ${this.out.c.dim(entry.handle.taskId.slice(0, 8))}` : '';
  }

  private startTicker(): void {
    if (!this.out.live || this.ticker) return;
    this.ticker = setInterval(() => {
      this.frame = (this.frame + 1) % SPINNER.length;
      // the ledger has what the scheduler decided since the last observation (next poll, last error)
      if (this.frame % 2 === 0) void this.refreshRecords();
      this.draw();
    }, 100);
  }

  /** The live lines: one per open task. */
  private draw(): void {
    if (!this.out.live) return;
    const c = this.out.c;
    const now = this.now();
    const lines: string[] = [];
    for (const entry of this.followed.values()) {
      if (entry.handle.localState !== 'tracking' || entry.detachReason) continue;
      const record = entry.record;
      const status = record.status ?? 'submitted';
      const parts = [
        `${c.cyan(SPINNER[this.frame] ?? '')} ${record.toolName} ${c.dim(entry.handle.taskId.slice(0, 8))} ${paintState(status, c)}`,
      ];
      if (record.statusMessage) parts.push(serverLine(record.statusMessage));
      parts.push(formatDuration(now - record.submittedAt));
      const failing = record.lastError && record.lastPollAt !== undefined && record.lastError.at >= record.lastPollAt;
      if (failing && record.lastError) parts.push(c.yellow(`poll failed: ${serverLine(record.lastError.message)}`));
      if (record.nextPollAt !== undefined) {
        const wait = record.nextPollAt - now;
        parts.push(c.dim(wait > 0 ? `next poll in ${formatDuration(wait)}` : 'polling'));
      }
      lines.push(parts.join(c.dim(' · ')));
    }
    this.out.setLive(lines);
  }

  private async refreshRecords(): Promise<void> {
    for (const entry of this.followed.values()) {
      if (entry.handle.localState !== 'tracking') continue;
      const record = await this.readRecord(entry.handle.recordId).catch(() => undefined);
      // never step back to an older snapshot than the handle's
      if (record && record.updatedAt >= entry.record.updatedAt) entry.record = record;
    }
  }

  private closeOut(entry: Followed, outcome: TaskOutcome): CloseOut {
    const record = outcome.record;
    const exitCode = exitCodeOf(outcome, entry.detachReason);
    const message =
      outcome.kind === 'failed'
        ? `${outcome.error.code} ${outcome.error.message}`
        : outcome.kind === 'expired'
          ? outcome.reason
          : undefined;
    const result: CloseOut = {
      taskId: entry.handle.taskId,
      record,
      outcome: outcome.kind,
      detachReason: entry.detachReason,
      exitCode,
      message,
    };
    this.printCloseOut(entry, result, outcome);
    return result;
  }

  private lost(entry: Followed, error: unknown): CloseOut {
    const result: CloseOut = {
      taskId: entry.handle.taskId,
      record: entry.record,
      outcome: 'lost',
      detachReason: entry.detachReason,
      exitCode: EXIT.usage,
      message: error instanceof Error ? error.message : String(error),
    };
    this.printCloseOut(entry, result, undefined);
    return result;
  }

  private printCloseOut(entry: Followed, closeOut: CloseOut, outcome: TaskOutcome | undefined): void {
    const record = closeOut.record;
    const elapsedMs = (record.terminalAt ?? this.now()) - record.submittedAt;
    const detached = closeOut.outcome === 'detached';
    this.out.event({
      event: 'closeout',
      taskId: closeOut.taskId,
      recordId: record.recordId,
      tool: record.toolName,
      endpoint: entry.endpoint,
      outcome: closeOut.outcome,
      ...(detached && { detachReason: closeOut.detachReason ?? 'requested' }),
      status: record.status ?? null,
      statusMessage: record.statusMessage ?? null,
      exitCode: closeOut.exitCode,
      elapsedMs,
      ...(outcome?.kind === 'completed' && { result: outcome.result }),
      ...(outcome?.kind === 'failed' && { error: outcome.error }),
      ...(closeOut.message !== undefined && outcome?.kind !== 'failed' && { reason: closeOut.message }),
    });
    if (this.out.json) return;
    const c = this.out.c;
    const id = `${record.toolName} ${c.bold(closeOut.taskId)}`;
    const after = c.dim(`after ${formatDuration(elapsedMs)}`);
    const resume = `\`closeout resume ${closeOut.taskId}\``;
    this.draw();
    switch (closeOut.outcome) {
      case 'completed': {
        const isError = outcome?.kind === 'completed' && outcome.result.isError === true;
        this.out.line(`${isError ? c.red('✘ completed with a tool error') : c.green('✔ completed')}  ${id}  ${after}`);
        if (outcome?.kind === 'completed') for (const line of resultLines(outcome.result, c)) this.out.line(line);
        break;
      }
      case 'failed':
        this.out.line(`${c.red('✘ failed')}  ${id}  ${after}: ${serverLine(closeOut.message ?? '')}`);
        break;
      case 'cancelled':
        this.out.line(`${c.magenta('■ cancelled')}  ${id}  ${after}`);
        break;
      case 'expired':
        this.out.line(`${c.red('✘ expired')}  ${id}: ${serverLine(closeOut.message ?? '')}`);
        break;
      case 'detached':
        if (closeOut.detachReason === 'needs-input') {
          this.out.line(
            `${c.yellow('↷ waiting for input')}  ${id}: the task goes on; answer with \`closeout answer ${closeOut.taskId}\` at a terminal (or add --accept JSON / --decline), then ${resume}`,
          );
        } else {
          this.out.line(
            `${c.yellow('↷ detached')}  ${id}: the task goes on (nothing was cancelled); ${resume} picks it up`,
          );
        }
        break;
      case 'lost':
        this.out.line(`${c.yellow('↷ stopped following')}  ${id}: ${closeOut.message ?? ''}`);
        break;
    }
  }
}
