/**
 * A fake external job API for the demo tools (docs/server.md, "Durable steps"): a render service that `start`s a job and
 * answers its `status` until it is done. Its jobs live in files under a directory of their own, outside the server
 * process, as a real service's would: a `closeout serve` restarted or replaced finds the jobs it started still there.
 * A job is done `durationMs` after it started, wall-clock, whether anyone follows it or not.
 *
 * `start` takes an idempotency key, as real job APIs do: a second start under the same key returns the first job. A
 * durable step whose process died between the start and the step's commit runs again in the next attempt, and the key
 * is what keeps that second run from starting a second job.
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  appendFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface FakeJob {
  jobId: string;
  idempotencyKey: string;
  scene: string;
  frames: number;
  startedAt: number;
  durationMs: number;
}

export type FakeJobStatus =
  { state: 'running'; framesDone: number; frames: number } | { state: 'done'; output: { url: string; frames: number } };

export class FakeJobApi {
  constructor(readonly dir: string) {
    mkdirSync(join(dir, 'jobs'), { recursive: true });
    mkdirSync(join(dir, 'keys'), { recursive: true });
  }

  /** The directory of $CLOSEOUT_FAKE_JOB_DIR, or one under the system's temp directory. */
  static fromEnvironment(): FakeJobApi {
    return new FakeJobApi(process.env['CLOSEOUT_FAKE_JOB_DIR'] ?? join(tmpdir(), 'closeout-fake-jobs'));
  }

  /**
   * Starts a render job, or returns the job already started under `idempotencyKey` (`created: false`). Every call is
   * appended to `calls.jsonl`, every job to `jobs/`: what a test counts.
   */
  start(request: { idempotencyKey: string; scene: string; frames: number; durationMs: number }): {
    jobId: string;
    created: boolean;
  } {
    appendFileSync(
      join(this.dir, 'calls.jsonl'),
      `${JSON.stringify({ op: 'start', idempotencyKey: request.idempotencyKey, pid: process.pid, at: Date.now() })}\n`,
    );
    const keyFile = join(this.dir, 'keys', createHash('sha256').update(request.idempotencyKey).digest('hex'));
    if (existsSync(keyFile))
      return { jobId: (JSON.parse(readFileSync(keyFile, 'utf8')) as FakeJob).jobId, created: false };
    const job: FakeJob = { jobId: `job-${randomUUID()}`, ...request, startedAt: Date.now() };
    // the job file first, then the key linked to it in one atomic step: a second start under the key finds the job
    const jobFile = join(this.dir, 'jobs', `${job.jobId}.json`);
    const tmp = `${jobFile}.tmp`;
    writeFileSync(tmp, JSON.stringify(job));
    renameSync(tmp, jobFile);
    try {
      linkSync(jobFile, keyFile);
      return { jobId: job.jobId, created: true };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      rmSync(jobFile);
      return { jobId: (JSON.parse(readFileSync(keyFile, 'utf8')) as FakeJob).jobId, created: false };
    }
  }

  /** The job's state now; throws for an unknown id, as an API answers 404. */
  status(jobId: string): FakeJobStatus {
    if (!/^job-[0-9a-f-]{36}$/.test(jobId)) throw new Error(`unknown job ${jobId}`);
    const job = JSON.parse(readFileSync(join(this.dir, 'jobs', `${jobId}.json`), 'utf8')) as FakeJob;
    const elapsed = Date.now() - job.startedAt;
    if (elapsed >= job.durationMs) {
      return { state: 'done', output: { url: `render://${encodeURIComponent(job.scene)}.mp4`, frames: job.frames } };
    }
    return { state: 'running', framesDone: Math.floor((job.frames * elapsed) / job.durationMs), frames: job.frames };
  }
}
