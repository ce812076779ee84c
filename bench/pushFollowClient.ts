/**
 * One client process of the push benchmark (`pushLateness`), told what to do by its parent (argv JSON, IPC messages
 * back), so that its CPU is its own and the server's process is not where the clients run: a TaskClient on a SQLite
 * ledger of its own, with push on or off, submits one task per entry of `args` and follows them all to their outcome.
 * It reports when it submitted them, when push covers all of them, its CPU and requests sent whenever the parent asks
 * (`sample`), and at the end the moment each task was closed out, on the machine's monotonic clock
 * (`process.hrtime`, one clock for every process of the host), so the parent can compare it with the server's write.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { connectHttpTaskClient, isTaskHandle } from 'closeout/client';

import { createHttpFetch } from '../src/client/transport/httpFetch.js';
import { childMailbox } from './childMailbox.js';
import { countMajorCollections } from './majorCollections.js';

export interface PushFollowClientConfig {
  name: string;
  /** The endpoint the client follows its tasks on (tasks/get, subscriptions/listen). */
  url: string;
  /** Where `tools/call` goes, when it is another instance than `url` (the terminal write on one, the stream on another). */
  callUrl?: string;
  ledgerPath: string;
  push: boolean;
  tool: string;
  /** One task per entry: its arguments. */
  args: Record<string, unknown>[];
  submitConcurrency: number;
}

export type PushFollowClientMessage =
  /** `taskIds[i]`: the task made with `args[i]`. */
  | { type: 'submitted'; taskIds: string[]; resent: number }
  /** Push covers every task submitted (its stream acknowledged them all). */
  | { type: 'covered'; tasks: number }
  /** `majorGcs`, `majorGcMs`: V8's full collections so far, and their main-thread pauses (perf_hooks `gc` entries). */
  | { type: 'sample'; cpuTotalUs: number; sent: Record<string, number>; majorGcs: number; majorGcMs: number }
  | { type: 'done'; closedAt: Record<string, number>; sent: Record<string, number> };

const SELF = fileURLToPath(import.meta.url);

/** The machine's monotonic clock in milliseconds: the same in every process of the host (CLOCK_MONOTONIC). */
export const monotonicMs = () => Number(process.hrtime.bigint()) / 1e6;

// ---- the parent side -----------------------------------------------------------------------------------------------

export interface PushFollowClientProcess {
  child: ChildProcess;
  next<T extends PushFollowClientMessage['type']>(type: T): Promise<Extract<PushFollowClientMessage, { type: T }>>;
  sample(): Promise<Extract<PushFollowClientMessage, { type: 'sample' }>>;
  kill(): Promise<void>;
}

export function startPushFollowClient(config: PushFollowClientConfig): PushFollowClientProcess {
  const child = fork(SELF, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  // the task arguments of 10,000 tasks are over the size of one command-line argument: they go by IPC
  child.send({ type: 'config', config });
  const next: PushFollowClientProcess['next'] = childMailbox<PushFollowClientMessage>(child, config.name);
  return {
    child,
    next,
    sample: () => {
      const answer = next('sample');
      child.send({ type: 'sample' });
      return answer;
    },
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

// ---- the child side ------------------------------------------------------------------------------------------------

const send = (message: PushFollowClientMessage) =>
  new Promise<void>((resolve, reject) =>
    process.send!(message, undefined, {}, (error) => (error ? reject(error) : resolve())),
  );
const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

async function main(config: PushFollowClientConfig): Promise<void> {
  const sent: Record<string, number> = {};
  const closedAt: Record<string, number> = {};
  let covered = false;
  const callUrl = config.callUrl;
  // idle sockets are let go well before the server's 5 s keep-alive ends (its hint capped too), so a loaded machine's
  // late timers never send a tools/call on a socket the server is closing (a call without an answer is not resent)
  const http = createHttpFetch({ keepAliveTimeout: 1000, keepAliveMaxTimeout: 1000 });
  const routed: typeof fetch = (input, init) => {
    const method = new Headers(init?.headers).get('mcp-method');
    if (method) sent[method] = (sent[method] ?? 0) + 1;
    return http.fetch(method === 'tools/call' && callUrl ? callUrl : input, init);
  };
  const client = await connectHttpTaskClient(config.url, {
    ledger: config.ledgerPath,
    fetch: routed,
    push: { enabled: config.push },
    onEvent: (event) => {
      if (event.type === 'closed' && event.record.taskId) closedAt[event.record.taskId] = monotonicMs();
      if (
        event.type === 'push' &&
        event.state.mode === 'push' &&
        !covered &&
        event.state.tasks === config.args.length
      ) {
        covered = true;
        void send({ type: 'covered', tasks: event.state.tasks });
      }
    },
  });
  const majorGc = countMajorCollections();
  process.on('message', (message: { type?: string }) => {
    if (message.type !== 'sample') return;
    void send({
      type: 'sample',
      cpuTotalUs: cpuNow(),
      sent: { ...sent },
      majorGcs: majorGc.count,
      majorGcMs: majorGc.ms,
    });
  });

  const taskIds: string[] = [];
  let resent = 0;
  const outcomes: Promise<unknown>[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: config.submitConcurrency }, async () => {
      while (next < config.args.length) {
        const index = next++;
        let answer;
        for (let attempt = 1; ; attempt++) {
          try {
            answer = await client.callTool(config.tool, config.args[index]!);
            break;
          } catch (error) {
            // a tools/call that got no answer (the loaded machine's server closed the socket) is sent again, counted;
            // a task it may have made stays unfollowed on the server
            if (attempt >= 3) throw error;
            resent++;
          }
        }
        if (!isTaskHandle(answer)) throw new Error(`${config.tool} answered without a task`);
        taskIds[index] = answer.taskId;
        outcomes.push(answer.outcome());
      }
    }),
  );
  await send({ type: 'submitted', taskIds, resent });
  await Promise.all(outcomes);
  await send({ type: 'done', closedAt, sent: { ...sent } });
  // the client keeps timers (leases, the stream) alive: this process is done
  process.exit(0);
}

if (process.argv[1] === SELF) {
  process.once('message', (message: { type: string; config: PushFollowClientConfig }) => {
    main(message.config).catch((error: unknown) => {
      console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
      process.exit(1);
    });
  });
}
