/**
 * Durable steps and the checkpoint of a running task (`ctx.step`, `ctx.checkpoint`; docs/server.md, "Durable steps"): what a
 * task's earlier attempts committed is read once, lazily, and handed back instead of running a step again; a new
 * result is committed under the run's lease before the step resolves.
 */
import { describeRefusal, measureJson, type TaskLimits } from './limits.js';
import type { JsonValue, LeaseRef, StoredStep, TaskStore } from './store/taskStore.js';
import { StepLimitError } from './store/taskStore.js';
import type { TaskCheckpoint } from './taskTool.js';

const MAX_STEP_NAME_LENGTH = 256;

/** What the steps of one run need from the runtime. */
export interface StepRun {
  toolName: string;
  /** Undefined for an inline run (no task): steps then just run, and the checkpoint lives in memory. */
  taskId: string | undefined;
  /** The run's lease, read at each write (a takeover of its own run by this instance moves its fence). */
  lease: LeaseRef | undefined;
  store: TaskStore;
  limits: TaskLimits;
  signal: AbortSignal;
  now: () => number;
  /** Runs a store call, trying again while the store is unreachable, for as long as the run is live. */
  retrying: <T>(call: () => Promise<T>) => Promise<T>;
  /** As `retrying`, for the write of a step whose function ran: it may land after a shutdown stopped the run. */
  committing: <T>(call: () => Promise<T>) => Promise<T>;
  /** Resolves once the run's lease is proven for a while ahead; throws once the run is aborted. */
  held: () => Promise<void>;
  /** The store refused a write for the lease: the run lost it. Aborts the run and throws. */
  leaseLost: () => never;
}

interface Loaded {
  steps: Map<string, StoredStep>;
  checkpoint: JsonValue | undefined;
}

export class DurableSteps {
  private loaded: Promise<Loaded> | undefined;
  private readonly names = new Set<string>();
  /** Steps whose function runs now: they count toward maxStepsPerTask before they are stored. */
  private inFlight = 0;
  /** Checkpoint writes, one after the other, so the last `set` is the one stored. */
  private checkpointWrites: Promise<unknown> = Promise.resolve();
  readonly checkpoint: TaskCheckpoint;

  constructor(private readonly run: StepRun) {
    this.checkpoint = {
      get: async <T>() => (await this.load()).checkpoint as T | undefined,
      set: (value) => {
        const write = this.checkpointWrites.then(() => this.setCheckpoint(value));
        this.checkpointWrites = write.catch(() => {});
        return write;
      },
    };
  }

  async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const { run } = this;
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_STEP_NAME_LENGTH) {
      throw new Error(`step name must be a string of 1 to ${MAX_STEP_NAME_LENGTH} characters, got ${String(name)}`);
    }
    if (this.names.has(name)) {
      throw new Error(
        `step ${JSON.stringify(name)} of tool ${run.toolName} was used twice in one run${this.ofTask()}: step names are unique over the task's life (add an index to a step in a loop)`,
      );
    }
    this.names.add(name);
    try {
      return await this.runOnce(name, fn);
    } catch (error) {
      // nothing was stored under the name: the run may try the step again
      this.names.delete(name);
      throw error;
    }
  }

  private async runOnce<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const { run } = this;
    run.signal.throwIfAborted();
    const loaded = await this.load();
    const stored = loaded.steps.get(name);
    if (stored) return stored.result as T;
    // refused before `fn` runs: a step that could not be stored would run again in the next attempt
    if (loaded.steps.size + this.inFlight >= run.limits.maxStepsPerTask) {
      throw this.overSteps(name);
    }
    this.inFlight++;
    try {
      // fenced before it starts, not only when it commits (docs/DESIGN.md, "Rules learned in the field", 12)
      if (run.lease !== undefined) await run.held();
      const value = await fn();
      const measured =
        value === undefined ? undefined : measureJson(value, run.limits.maxStepResultBytes, run.limits.maxJsonDepth);
      if (measured && !measured.ok) {
        throw new Error(
          `step ${JSON.stringify(name)} of tool ${run.toolName} returned a result that is ${describeRefusal(measured, run.limits, 'maxStepResultBytes')}; it was not stored, so a later attempt runs the step again`,
        );
      }
      // the value as JSON gives it back: the same in this attempt as in any later one
      const result = value === undefined ? undefined : (JSON.parse(JSON.stringify(value)) as JsonValue);
      if (run.lease === undefined) return result as T;
      const lease = run.lease;
      const written = await run.committing(() =>
        run.store
          .recordStep(lease, name, result, run.now(), {
            maxSteps: finite(run.limits.maxStepsPerTask),
            maxTotalBytes: finite(run.limits.maxStepBytesPerTask),
          })
          .catch(limitAsValue),
      );
      if (written instanceof StepLimitError) throw this.refusal(name, written);
      const step = written.held ? written.step : undefined;
      if (!step) return run.leaseLost();
      loaded.steps.set(name, step);
      return step.result as T;
    } finally {
      this.inFlight--;
    }
  }

  private async setCheckpoint(value: unknown): Promise<void> {
    const { run } = this;
    run.signal.throwIfAborted();
    const measured = measureJson(value, run.limits.maxStepResultBytes, run.limits.maxJsonDepth);
    if (!measured.ok) {
      throw new Error(
        `the checkpoint of tool ${run.toolName}${this.ofTask()} is ${describeRefusal(measured, run.limits, 'maxStepResultBytes')}; it was not stored`,
      );
    }
    const loaded = await this.load();
    const json = JSON.parse(JSON.stringify(value)) as JsonValue;
    if (run.lease !== undefined) {
      const lease = run.lease;
      const written = await run.retrying(() =>
        run.store
          .saveCheckpoint(lease, json, run.now(), { maxTotalBytes: finite(run.limits.maxStepBytesPerTask) })
          .catch(limitAsValue),
      );
      if (written instanceof StepLimitError) throw this.refusal('the checkpoint', written);
      if (!written) return run.leaseLost();
    }
    loaded.checkpoint = json;
  }

  /** What the task's earlier attempts stored, read once per run, when a step or the checkpoint is first used. */
  private load(): Promise<Loaded> {
    const { run } = this;
    const taskId = run.taskId;
    this.loaded ??=
      taskId === undefined || run.lease === undefined
        ? Promise.resolve({ steps: new Map(), checkpoint: undefined })
        : run
            .retrying(() => run.store.readSteps(taskId))
            .then(({ steps, checkpoint }) => ({
              steps: new Map(steps.map((step) => [step.name, step])),
              checkpoint,
            }));
    return this.loaded;
  }

  private ofTask(): string {
    return this.run.taskId === undefined ? '' : ` of task ${this.run.taskId}`;
  }

  private overSteps(name: string): Error {
    return new Error(
      `step ${JSON.stringify(name)} of tool ${this.run.toolName} would be more than this server's limit of ${this.run.limits.maxStepsPerTask} steps per task (maxStepsPerTask); it did not run: use fewer, coarser steps, or the checkpoint for progress through a loop`,
    );
  }

  private refusal(what: string, error: StepLimitError): Error {
    if (error.kind === 'steps') return this.overSteps(what);
    const subject = what === 'the checkpoint' ? what : `step ${JSON.stringify(what)}`;
    return new Error(
      `${subject} of tool ${this.run.toolName} would make task ${this.run.taskId} hold ${error.wouldHold} bytes of steps and checkpoint, over this server's limit of ${error.limit} bytes per task (maxStepBytesPerTask); it was not stored`,
    );
  }
}

/** A limit set to Infinity is no bound for the store to check. */
function finite(limit: number): number | undefined {
  return Number.isFinite(limit) ? limit : undefined;
}

/** A store's limit refusal comes back as a value, so the retry loop (meant for an unreachable store) never retries it. */
function limitAsValue(error: unknown): StepLimitError {
  if (error instanceof StepLimitError) return error;
  throw error;
}
