// Durable steps (docs/server.md, "Durable steps"): a step's function runs once per task, its result committed under
// the lease before the step resolves and handed back to later attempts without running it again; a step that threw
// is not stored; names are unique over the task's life; a run that lost its lease cannot commit; every limit refuses
// naming itself. Real TaskServers on a real SQLite file; a "restart" is a second server on the same file.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { CallToolResult } from '@modelcontextprotocol/server';
import { afterEach, describe, expect, it } from 'vitest';

import type { TaskLimits } from '../../src/server/limits.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import type { StoredTask } from '../../src/server/store/taskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import type { TaskContext } from '../../src/server/taskTool.js';
import { waitFor } from '../support/waitFor.js';

const dirs: string[] = [];
const open: Array<{ close(): Promise<void> }> = [];

afterEach(async () => {
  for (const closable of open.splice(0).reverse()) await closable.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function storePath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'closeout-steps-'));
  dirs.push(dir);
  return join(dir, 'tasks.db');
}

type Handler = (args: Record<string, unknown>, ctx: TaskContext) => Promise<CallToolResult>;

async function server(path: string, handler: Handler, limits: Partial<TaskLimits> = {}): Promise<TaskServer> {
  const store = new SqliteTaskStore(path);
  const tasks = new TaskServer({ store, leaseMs: 2000, onError: () => {}, ...limits });
  tasks.registerTool('job', { task: { support: 'required', resumable: true } }, handler);
  await tasks.start();
  open.push(store, tasks);
  return tasks;
}

async function create(tasks: TaskServer): Promise<string> {
  return (await tasks.createTask(tasks.tool('job')!, {}, 'alice', undefined)).taskId;
}

async function settled(tasks: TaskServer, taskId: string): Promise<StoredTask> {
  return waitFor(
    `task ${taskId} to settle`,
    async () => {
      const task = await tasks.store.get(taskId);
      return task && ['completed', 'failed', 'cancelled'].includes(task.status) ? task : undefined;
    },
    15_000,
  );
}

function text(value: unknown): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value) }] };
}

/** A promise the test resolves, and a flag that says a handler reached it. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open, reached: false };
}

describe('ctx.step and ctx.checkpoint across attempts', () => {
  it('runs each step once, hands its stored result to the next attempt, and keeps the checkpoint', async () => {
    const path = storePath();
    const calls: string[] = [];
    const blocked = gate();
    const handler =
      (lifeOf: number): Handler =>
      async (_args, ctx) => {
        const job = await ctx.step('start-job', () => {
          calls.push(`start-job@${lifeOf}`);
          return { jobId: `job-${lifeOf}`, at: new Date(0) };
        });
        const from = (await ctx.checkpoint.get<number>()) ?? 0;
        for (let i = from; i < 4; i++) {
          calls.push(`item-${i}@${lifeOf}`);
          await ctx.checkpoint.set(i + 1);
          if (lifeOf === 1 && i === 1) {
            blocked.reached = true;
            await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', reject));
          }
        }
        const summary = await ctx.step('summary', async () => {
          calls.push(`summary@${lifeOf}`);
          return undefined;
        });
        return text({ job, summary: summary ?? null, attempt: ctx.attempt });
      };
    const first = await server(path, handler(1));
    const taskId = await create(first);
    await waitFor('the first run to reach item 1', () => (blocked.reached ? true : undefined));
    // a graceful stop aborts the handler and hands its lease back: the next server re-runs it from the top
    await first.close();
    const second = await server(path, handler(2));
    const task = await settled(second, taskId);
    expect(task.status).toBe('completed');
    // the stored result, as JSON gives it back (the Date became its string), from the first attempt
    expect(JSON.parse((task.result!['content'] as { text: string }[])[0]!.text)).toEqual({
      job: { jobId: 'job-1', at: '1970-01-01T00:00:00.000Z' },
      summary: null,
      attempt: 2,
    });
    // item 1 was done and checkpointed before the stop; the second attempt went on from item 2
    expect(calls).toEqual(['start-job@1', 'item-0@1', 'item-1@1', 'item-2@2', 'item-3@2', 'summary@2']);
    expect(await second.store.readSteps(taskId)).toMatchObject({
      steps: [{ name: 'start-job' }, { name: 'summary', result: undefined }],
      checkpoint: 4,
    });
  });

  it('gives the first attempt the same value a later one gets: its result as JSON', async () => {
    const tasks = await server(storePath(), async (_args, ctx) => {
      const value = await ctx.step('dated', () => ({ at: new Date(0), skip: undefined, n: 1 }));
      return text(value);
    });
    const task = await settled(tasks, await create(tasks));
    expect((task.result!['content'] as { text: string }[])[0]!.text).toBe('{"at":"1970-01-01T00:00:00.000Z","n":1}');
  });

  it('does not store a step whose function threw: the same name runs again, and then is stored', async () => {
    let tries = 0;
    const tasks = await server(storePath(), async (_args, ctx) => {
      const charge = () =>
        ctx.step('charge', () => {
          if (++tries === 1) throw new Error('gateway timeout');
          return { chargeId: `ch-${tries}` };
        });
      const first = await charge().catch((error: Error) => error.message);
      const second = await charge();
      return text({ first, second });
    });
    const taskId = await create(tasks);
    const task = await settled(tasks, taskId);
    expect(JSON.parse((task.result!['content'] as { text: string }[])[0]!.text)).toEqual({
      first: 'gateway timeout',
      second: { chargeId: 'ch-2' },
    });
    expect((await tasks.store.readSteps(taskId)).steps).toEqual([
      { name: 'charge', result: { chargeId: 'ch-2' }, committedAt: expect.any(Number) },
    ]);
  });

  it('refuses a name used twice in one run, naming it, without running the second function', async () => {
    let ran = 0;
    const tasks = await server(storePath(), async (_args, ctx) => {
      await ctx.step('item', () => ++ran);
      await ctx.step('item', () => ++ran);
      return text('unreachable');
    });
    const task = await settled(tasks, await create(tasks));
    expect(task.status).toBe('failed');
    expect(task.error?.message).toMatch(
      /step "item" of tool job was used twice in one run of task .*: step names are unique over the task's life/,
    );
    expect(ran).toBe(1);
  });

  it('does not let a run that lost its lease commit a step, and aborts it', async () => {
    const path = storePath();
    const blocked = gate();
    let aborted: unknown;
    const tasks = await server(path, async (_args, ctx) => {
      try {
        await ctx.step('slow', async () => {
          blocked.reached = true;
          await blocked.opened;
          return 'late';
        });
      } catch (error) {
        aborted = error;
        throw error;
      }
      return text('unreachable');
    });
    const taskId = await create(tasks);
    await waitFor('the step to run', () => (blocked.reached ? true : undefined));
    // another instance takes the task over (its holder declared dead): the fence moves on
    const other = new SqliteTaskStore(path);
    open.push(other);
    const [claimed] = await other.claimOrphans('instance-b', Date.now(), Date.now() + 60_000, 10, [tasks.instanceId]);
    expect(claimed?.fence).toBe(2);
    blocked.open();
    await waitFor('the old run to stop', () => (aborted ? true : undefined));
    expect(aborted).toMatchObject({ name: 'TaskAbortedError', cause: 'lease-lost' });
    expect(await other.readSteps(taskId)).toEqual({ steps: [], checkpoint: undefined });
    expect((await other.get(taskId))?.status).toBe('working');
  });

  it('runs a step and keeps the checkpoint in memory when the tool runs inline, without a task', async () => {
    const tasks = await server(storePath(), async (_args, ctx) => {
      const a = await ctx.step('a', () => 1);
      await ctx.checkpoint.set({ at: a });
      return text({ a, checkpoint: await ctx.checkpoint.get() });
    });
    const result = await tasks.runInline(tasks.tool('job')!, {}, 'alice', new AbortController().signal);
    expect(result).toEqual(text({ a: 1, checkpoint: { at: 1 } }));
  });
});

describe('durable step limits', () => {
  async function failure(limits: Partial<TaskLimits>, handler: Handler): Promise<string | undefined> {
    const tasks = await server(storePath(), handler, limits);
    const task = await settled(tasks, await create(tasks));
    expect(task.status).toBe('failed');
    return task.error?.message;
  }

  it('refuses a step over maxStepsPerTask before its function runs', async () => {
    let ran = 0;
    const message = await failure({ maxStepsPerTask: 2 }, async (_args, ctx) => {
      for (let i = 0; i < 3; i++) await ctx.step(`item-${i}`, () => ++ran);
      return text('unreachable');
    });
    expect(message).toContain(
      `step "item-2" of tool job would be more than this server's limit of 2 steps per task (maxStepsPerTask); it did not run`,
    );
    expect(ran).toBe(2);
  });

  it('refuses a step result over maxStepResultBytes and a checkpoint over it too, storing neither', async () => {
    const message = await failure({ maxStepResultBytes: 100 }, async (_args, ctx) => {
      const refused = await ctx.checkpoint.set('c'.repeat(200)).catch((error: Error) => error.message);
      expect(refused).toMatch(
        /^the checkpoint of tool job of task .* is 202 bytes serialized, over this server's limit of 100 bytes \(maxStepResultBytes\); it was not stored$/,
      );
      await ctx.step('big', () => 'r'.repeat(200));
      return text('unreachable');
    });
    expect(message).toContain(
      `step "big" of tool job returned a result that is 202 bytes serialized, over this server's limit of 100 bytes (maxStepResultBytes); it was not stored, so a later attempt runs the step again`,
    );
  });

  it('refuses a write that would make the task hold more than maxStepBytesPerTask', async () => {
    const message = await failure({ maxStepBytesPerTask: 50 }, async (_args, ctx) => {
      await ctx.step('a', () => 'a'.repeat(30));
      await ctx.step('b', () => 'b'.repeat(30));
      return text('unreachable');
    });
    expect(message).toMatch(
      /step "b" of tool job would make task .* hold 64 bytes of steps and checkpoint, over this server's limit of 50 bytes per task \(maxStepBytesPerTask\); it was not stored/,
    );
  });
});
