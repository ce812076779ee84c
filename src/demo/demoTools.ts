/**
 * The demo tools `closeout serve` and `closeout demo` expose: a multi-step batch job with status messages that goes on
 * from its checkpoint after a restart, a render on an external job API followed through a durable step, a deploy that
 * asks for approval through elicitation, a job that fails with a protocol error, and a plain fast tool.
 *
 * With `CLOSEOUT_RUN_LOG=FILE` in the environment, every handler start appends one JSON line
 * `{"tool","taskId","attempt","pid","instance","at"}` to FILE before it does anything else: the chaos soak (test/e2e/soak.ts) counts
 * how often each handler really ran from it, rather than from what the server's store says about itself. With
 * `CLOSEOUT_ITEM_LOG=FILE`, `batch_job` appends `{"taskId","item","attempt","pid"}` for every item it processes.
 * `render_job`'s external jobs live under `CLOSEOUT_FAKE_JOB_DIR` (fakeJobApi.ts); with
 * `CLOSEOUT_DEMO_HOLD_AT=job-started|start-committed` and `CLOSEOUT_DEMO_HOLD_FILE=FILE` it writes the job id to FILE
 * once the job started (before its step commits) or once the step committed, and then waits for a test to kill the
 * process right at that step boundary.
 */
import { appendFileSync, writeFileSync } from 'node:fs';

import { ProtocolError } from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

import type { TaskContext, TaskServer } from '../server/index.js';
import { abortableSleep } from './abortableSleep.js';
import { FakeJobApi } from './fakeJobApi.js';

/** One line per handler start in $CLOSEOUT_RUN_LOG, written synchronously so a SIGKILL right after cannot lose it. */
function recordRun(tool: string, ctx: TaskContext): void {
  const path = process.env['CLOSEOUT_RUN_LOG'];
  if (!path) return;
  // CLOSEOUT_RUN_INSTANCE names the process when pids are not unique (instances in PID namespaces of their own)
  const instance = process.env['CLOSEOUT_RUN_INSTANCE'] ?? String(process.pid);
  const run = { tool, taskId: ctx.taskId ?? null, attempt: ctx.attempt, pid: process.pid, instance, at: Date.now() };
  appendFileSync(path, `${JSON.stringify(run)}\n`);
}

/** One line per batch item processed in $CLOSEOUT_ITEM_LOG, written before the item's checkpoint commits. */
function recordItem(ctx: TaskContext, item: number): void {
  const path = process.env['CLOSEOUT_ITEM_LOG'];
  if (!path) return;
  appendFileSync(
    path,
    `${JSON.stringify({ taskId: ctx.taskId ?? null, item, attempt: ctx.attempt, pid: process.pid })}\n`,
  );
}

/** Where $CLOSEOUT_DEMO_HOLD_AT says, writes `jobId` to $CLOSEOUT_DEMO_HOLD_FILE and waits until the task is aborted. */
async function holdAt(point: 'job-started' | 'start-committed', jobId: string, ctx: TaskContext): Promise<void> {
  const file = process.env['CLOSEOUT_DEMO_HOLD_FILE'];
  if (process.env['CLOSEOUT_DEMO_HOLD_AT'] !== point || !file || !ctx.taskId) return;
  writeFileSync(file, jobId);
  await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', reject, { once: true }));
}

/** How often render_job asks the external API about its job. */
const RENDER_POLL_MS = 200;

export function registerDemoTools(tasks: TaskServer): TaskServer {
  tasks.registerTool(
    'batch_job',
    {
      title: 'Batch job',
      description:
        'Processes a batch of items one by one, reporting progress in the status message. Resumable: after a restart it goes on from the last item done.',
      inputSchema: z.object({
        items: z.number().int().min(1).max(1000).default(5),
        stepMs: z.number().int().min(0).max(60_000).default(400),
      }),
      task: { support: 'optional', resumable: true },
    },
    async ({ items, stepMs }, ctx) => {
      recordRun('batch_job', ctx);
      // the last item done, committed after each item: a re-run goes on from there (docs/server.md, "Durable steps")
      const done = (await ctx.checkpoint.get<number>()) ?? 0;
      for (let i = done + 1; i <= items; i++) {
        await abortableSleep(stepMs, ctx.signal);
        recordItem(ctx, i);
        await ctx.checkpoint.set(i);
        await ctx.status(`Processed ${i} of ${items} items`);
      }
      return {
        content: [{ type: 'text', text: `Processed ${items} items` }],
        structuredContent: { processed: items, attempt: ctx.attempt },
      };
    },
  );

  tasks.registerTool(
    'export_report',
    {
      title: 'Export report',
      description:
        'Renders a report page by page and streams it to its destination. Not resumable: a stream cannot be rewound, so a restart fails it as interrupted.',
      inputSchema: z.object({
        pages: z.number().int().min(1).max(1000).default(3),
        pageMs: z.number().int().min(0).max(60_000).default(500),
      }),
      task: { support: 'optional', resumable: false },
    },
    async ({ pages, pageMs }, ctx) => {
      recordRun('export_report', ctx);
      for (let page = 1; page <= pages; page++) {
        await abortableSleep(pageMs, ctx.signal);
        await ctx.status(`Rendered page ${page} of ${pages}`);
      }
      return { content: [{ type: 'text', text: `Exported a report of ${pages} pages` }] };
    },
  );

  tasks.registerTool(
    'approve_deploy',
    {
      title: 'Deploy with approval',
      description: 'Asks a person to approve a deployment (elicitation), then deploys. Runs only as a task.',
      inputSchema: z.object({
        env: z.string().min(1).max(100),
        deployMs: z.number().int().min(0).max(60_000).default(300),
      }),
      task: { support: 'required', resumable: true },
    },
    async ({ env, deployMs }, ctx) => {
      recordRun('approve_deploy', ctx);
      await ctx.status(`Waiting for approval to deploy to ${env}`);
      const answer = await ctx.input('approval', {
        method: 'elicitation/create',
        params: {
          mode: 'form',
          message: `Deploy to ${env}?`,
          requestedSchema: {
            type: 'object',
            properties: {
              approve: { type: 'boolean', title: 'Approve', description: `Deploy to ${env} now`, default: true },
              note: { type: 'string', title: 'Note', description: 'Why (optional)' },
            },
            required: ['approve'],
          },
        },
      });
      const content = answer['content'] as { approve?: boolean; note?: string } | undefined;
      if (answer['action'] !== 'accept' || content?.approve !== true) {
        return { content: [{ type: 'text', text: `Deployment to ${env} was not approved` }], isError: true };
      }
      await ctx.status(`Deploying to ${env}`);
      await abortableSleep(deployMs, ctx.signal);
      const note = content.note ? ` (${content.note})` : '';
      return { content: [{ type: 'text', text: `Deployed to ${env}${note}` }] };
    },
  );

  tasks.registerTool(
    'flaky_upstream',
    {
      title: 'Flaky upstream',
      description: 'Calls an upstream API that answers with a rate-limit error: the task ends failed with that error.',
      task: { support: 'optional' },
    },
    async (_args, ctx) => {
      recordRun('flaky_upstream', ctx);
      await abortableSleep(200, ctx.signal);
      throw new ProtocolError(-32603, 'Upstream API rate limit exceeded', { retryAfterMs: 60_000 });
    },
  );

  tasks.registerTool(
    'echo',
    {
      title: 'Echo',
      description: 'Returns its text at once. Never a task.',
      inputSchema: z.object({ text: z.string().max(10_000) }),
      task: { support: 'never' },
    },
    ({ text }, ctx) => {
      recordRun('echo', ctx);
      return { content: [{ type: 'text', text }] };
    },
  );

  tasks.registerTool(
    'render_job',
    {
      title: 'Render on an external job API',
      description:
        'Starts a render on an external job API (a fake one, kept in files) and follows it until done. Resumable: the start is a durable step, so a restart follows the same job and never starts a second.',
      inputSchema: z.object({
        scene: z.string().min(1).max(200),
        frames: z.number().int().min(1).max(100_000).default(240),
        renderMs: z.number().int().min(0).max(600_000).default(3000),
      }),
      task: { support: 'optional', resumable: true },
    },
    async ({ scene, frames, renderMs }, ctx) => {
      recordRun('render_job', ctx);
      const api = FakeJobApi.fromEnvironment();
      // the step commits the job id; the idempotency key makes a start re-run (a crash before that commit) return
      // the same job
      const { jobId } = await ctx.step('start', async () => {
        const started = api.start({
          idempotencyKey: `closeout:${ctx.taskId ?? 'inline'}:start`,
          scene,
          frames,
          durationMs: renderMs,
        });
        await holdAt('job-started', started.jobId, ctx);
        return { jobId: started.jobId };
      });
      await holdAt('start-committed', jobId, ctx);
      for (;;) {
        const status = api.status(jobId);
        if (status.state === 'done') {
          return {
            content: [
              { type: 'text', text: `Rendered ${scene}: ${status.output.url} (${status.output.frames} frames)` },
            ],
            structuredContent: { jobId, output: status.output, attempt: ctx.attempt },
          };
        }
        await ctx.status(`Following render job ${jobId}: ${status.framesDone} of ${status.frames} frames`);
        await abortableSleep(RENDER_POLL_MS, ctx.signal);
      }
    },
  );

  return tasks;
}
