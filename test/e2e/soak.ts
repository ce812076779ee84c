/**
 * The chaos soak. Client processes (fixtures/soakClient.mjs, each with its own ledger and principal) submit a steady
 * stream of tasks of every kind — fast, slow, input-requiring, failing, cancelled — to several `closeout serve`
 * processes, on SQLite (one store file shared by every instance) and on PostgreSQL, each backend behind a ChaosProxy
 * that drops connections and delays answers, while a fault injector SIGKILLs random server and client processes and
 * starts them again, pauses client processes (SIGSTOP) for longer than their lease, races a second process's
 * resumeAll() against a client on its own ledger, steps a client's wall clock (libfaketime), drops the PostgreSQL
 * connections, stops PostgreSQL for seconds, stalls the store past a lease (PostgreSQL frozen, a SQLite write lock
 * held) and, the moment the store answers again, starts a fresh instance and a resumeAll(); one instance per backend
 * runs in a PID namespace of its own (a container sharing the host's name). Everything runs on loopback and is
 * bounded in count and time.
 *
 * Then, for every submission: the client's ledger and the server's store agree on the final state and result; no
 * handler ran more often than its policy allows (counted from the demo tools' CLOSEOUT_RUN_LOG, not from the store:
 * a non-resumable tool at most once, a resumable one once per attempt, and again only after the process running it
 * was killed); no input was asked twice; no task is left open; two reads on two instances give the same answer.
 *
 * `soak.test.ts` runs SHORT inside `npm test`; `npm run soak` runs LONG (RELIABILITY.md has its figures).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

import pg from 'pg';

import type { TaskRecord } from '../../src/client/index.js';
import { PostgresLedger, SqliteLedger } from '../../src/client/index.js';
import { INTERRUPTED_MESSAGE } from '../../src/server/taskServerOptions.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { ChaosProxy, type ChaosRates } from '../support/chaosProxy.js';
import { type FakeClock, fakeClock } from '../support/faketime.js';
import { holdWriteLock } from '../support/ledgerLock.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { inNewPidNamespace, requirePidNamespaces } from '../support/processWrappers.js';
import { rpc } from '../support/rpc.js';

const SOAK_CLIENT = fileURLToPath(new URL('./fixtures/soakClient.mjs', import.meta.url));

/**
 * Where the servers keep their tasks and the clients their ledgers: `sqlite` and `postgres` name the store, each client
 * keeping a SQLite ledger of its own; `postgres-fleet` is a store on PostgreSQL and clients that are one fleet: one
 * PostgreSQL ledger shared by every client process, one credential, each process taking over the records
 * of the others that stop renewing their leases (`takeOverEveryMs`).
 */
export type BackendKind = 'sqlite' | 'postgres' | 'postgres-fleet';

export interface SoakConfig {
  name: string;
  /** Seeds the plans, the fault injector and the proxies (the timing of processes is not reproducible). */
  seed: number;
  backends: BackendKind[];
  serversPerBackend: number;
  clientsPerBackend: number;
  jobsPerClient: number;
  /** Each client's submissions are spread over this long. */
  submitForMs: number;
  /** Processes are killed until this long after the first submission; the proxy misbehaves until then too. */
  faultsForMs: number;
  /** Mean pause between two faults (over all backends). */
  killEveryMs: number;
  /** How long PostgreSQL stays down in one outage. */
  databaseOutageMs: number;
  /**
   * How long a store stalls (every PostgreSQL process SIGSTOPped; another process holding the SQLite file's write
   * lock): longer than a server lease, so a lease lapses while its holder lives (RELIABILITY.md, "Stalled stores").
   */
  storeStallMs: number;
  /** After the faults stop, how long the clients have to close out everything. */
  settleTimeoutMs: number;
  serverLeaseMs: number;
  clientLeaseMs: number;
  clientRequestTimeoutMs: number;
  /** How long a `closeout serve` may take to print its URL before the start counts as failed. */
  serveStartMs: number;
  chaos: ChaosRates;
  /** The whole run, PostgreSQL's start and the checks included, must end within this. */
  timeoutMs: number;
}

const CHAOS: ChaosRates = {
  dropBefore: 0.03,
  dropAfter: 0.03,
  delay: 0.08,
  delayMaxMs: 1_500,
  stall: 0.005,
  stallMs: 5_000,
};

/** The mode `npm test` runs: a couple of dozen seconds of faults, about a minute in all. */
export const SHORT: SoakConfig = {
  name: 'short',
  seed: 7,
  // the fleet's check is the take-up its kills wait for before starting the worker again (killFleetWorker), not
  // which process happened to close a record out
  backends: ['sqlite', 'postgres', 'postgres-fleet'],
  serversPerBackend: 2,
  clientsPerBackend: 2,
  jobsPerClient: 18,
  // faults come every 0.45 to 1.35 s, so that each of the 22 kinds-per-backend runs once in the first ~20 s, while
  // jobs still arrive (a fleet kill needs a worker that follows a record)
  submitForMs: 22_000,
  faultsForMs: 24_000,
  killEveryMs: 900,
  databaseOutageMs: 3_000,
  storeStallMs: 4_500,
  settleTimeoutMs: 45_000,
  serverLeaseMs: 3_000,
  clientLeaseMs: 2_000,
  clientRequestTimeoutMs: 4_000,
  serveStartMs: 30_000,
  chaos: CHAOS,
  // under two minutes in npm test, whatever the load
  timeoutMs: 115_000,
};

/** `npm run soak`: eight minutes of faults on three instances and three clients per backend. */
export const LONG: SoakConfig = {
  ...SHORT,
  name: 'long',
  backends: ['sqlite', 'postgres', 'postgres-fleet'],
  serversPerBackend: 3,
  clientsPerBackend: 3,
  jobsPerClient: 240,
  submitForMs: 450_000,
  faultsForMs: 480_000,
  killEveryMs: 2_500,
  settleTimeoutMs: 120_000,
  timeoutMs: 720_000,
};

type JobKind = 'fast' | 'slow' | 'stream' | 'input' | 'failing' | 'cancelled';

/** What the injector does at one tick. The PostgreSQL faults only hit the PostgreSQL backend. */
type FaultKind =
  | 'kill-server'
  | 'kill-client'
  | 'pause-client'
  | 'resume-race'
  | 'clock-step'
  | 'connection-drops'
  | 'database-outage'
  | 'store-stall';

const FAULT_WEIGHTS: Array<[FaultKind, number]> = [
  ['kill-server', 30],
  ['kill-client', 25],
  ['pause-client', 15],
  ['resume-race', 10],
  ['clock-step', 8],
  ['connection-drops', 8],
  ['database-outage', 4],
  ['store-stall', 4],
];

const POSTGRES_FAULTS = new Set<FaultKind>(['connection-drops', 'database-outage']);

/** The wall-clock offsets a stepped client moves between (an NTP step, a VM snapshot restored). */
const CLOCK_OFFSETS = ['+0', '-45s', '+40s', '-20s'];

interface Job {
  jobId: string;
  kind: JobKind;
  tool: string;
  args: Record<string, unknown>;
  /** When to submit, in ms after the soak's start. */
  at: number;
  cancelAfterMs?: number;
}

const KIND_WEIGHTS: Array<[JobKind, number]> = [
  ['fast', 25],
  ['slow', 20],
  ['stream', 15],
  ['input', 15],
  ['failing', 10],
  ['cancelled', 15],
];

/** How often a fleet's client process takes up records the others stopped renewing. */
const FLEET_TAKE_OVER_EVERY_MS = 500;
/** How long a fleet kill waits for a worker that follows a record, and then for the others to take its records up. */
const FLEET_VICTIM_WAIT_MS = 10_000;
const FLEET_TAKE_UP_WAIT_MS = 30_000;

/** Handlers the server re-runs after a crash (the others fail as interrupted). */
const RESUMABLE_TOOLS = new Set(['batch_job', 'approve_deploy']);

export interface SoakReport {
  config: string;
  seed: number;
  durationMs: number;
  /** Jobs submitted (each once, by the application). */
  submitted: number;
  /** tools/call sent, resubmissions of unknown outcomes included. */
  toolCalls: number;
  outcomes: Record<string, number>;
  faults: {
    serverKills: number;
    clientKills: number;
    clientPauses: number;
    resumeRaces: number;
    clockSteps: number;
    connectionDrops: number;
    databaseOutages: number;
    storeStalls: number;
    /** Fresh instances and resumeAll() processes started the moment the store answered again. */
    entrantsAfterStall: number;
    droppedBefore: number;
    droppedAfter: number;
    delayed: number;
    stalled: number;
    total: number;
  };
  recovered: {
    total: number;
    resubmitted: number;
    resumedByAnotherClient: number;
    takenOverAfterServerKill: number;
    /** Records of a fleet's client closed out by another client's process (`postgres-fleet`). */
    takenOverByAnotherWorker: number;
    /** Records killed fleet workers followed when they died, and how many the other workers took up before they were
     * started again (`postgres-fleet`: all of them, or it is a violation). */
    fleetOrphans: number;
    fleetTakenUp: number;
  };
  /** Input requests asked again because the client died between asking and storing the answer. */
  reaskedAfterCrash: number;
  /** ... or was paused past its lease there, and another process took the task up (told `previouslyAsked`). */
  reaskedAfterPause: number;
  /** Instance starts in a PID namespace of their own. */
  namespacedStarts: number;
  /** What the server instances logged (not a failure by itself: a killed database connection is logged). */
  serverLog: string[];
  /** Jobs without a closed-out record that agrees with the server's store, with why. */
  lost: string[];
  /** Any other broken promise (a second run, a second ask, two reads that differ, a crash). */
  violations: string[];
  backends: Array<{
    kind: BackendKind;
    submitted: number;
    faults: number;
    recovered: number;
    lost: number;
    /** Requests the proxy answered 502, by cause (no instance up while all were restarting, or one died mid-request). */
    badGateway: Record<string, number>;
  }>;
  /** Where the soak's files are while it runs (kept when SOAK_KEEP=1). */
  dir: string;
}

export async function runSoak(config: SoakConfig, log: (line: string) => void = console.log): Promise<SoakReport> {
  const started = Date.now();
  const random = mulberry32(config.seed);
  const dir = mkdtempSync(join(tmpdir(), 'closeout-soak-'));
  const backends: BackendRun[] = [];
  // one PostgreSQL cluster per backend: a backend's outages and connection drops are its own faults, never another's
  const clusters: StartedPostgres[] = [];
  try {
    for (const [index, kind] of config.backends.entries()) {
      let store: string;
      let sharedLedger: string | undefined;
      let postgres: StartedPostgres | undefined;
      if (kind === 'postgres' || kind === 'postgres-fleet') {
        postgres = await startPostgres();
        clusters.push(postgres);
        store = (await postgres.createDatabase()).connectionString;
        if (kind === 'postgres-fleet') sharedLedger = (await postgres.createDatabase()).connectionString;
      } else {
        mkdirSync(join(dir, kind));
        store = join(dir, kind, 'server.db');
      }
      const backend = new BackendRun(
        kind,
        join(dir, kind),
        store,
        config,
        mulberry32(config.seed * 31 + index),
        kind === 'sqlite' ? undefined : postgres,
        sharedLedger,
      );
      backends.push(backend);
      await backend.startServers();
    }
    const startAt = Date.now() + 1_000;
    for (const backend of backends) backend.startClients(startAt, random);
    log(
      `soak ${config.name} (seed ${config.seed}): ${config.backends.join(' + ')}, ${config.serversPerBackend} servers and ` +
        `${config.clientsPerBackend} clients each, ${config.jobsPerClient} jobs per client over ${config.submitForMs / 1000} s, ` +
        `faults for ${config.faultsForMs / 1000} s`,
    );

    // the fault injector: every kind of fault on every backend once, in a seeded order, then random ones
    const due = shuffle(
      backends.flatMap((backend) => backend.supportedFaults().map((fault) => ({ backend, fault }))),
      random,
    );
    const faultsUntil = startAt + config.faultsForMs;
    while (Date.now() < faultsUntil) {
      await sleep(config.killEveryMs * (0.5 + random()));
      const next = due.shift();
      const backend = next?.backend ?? backends[Math.floor(random() * backends.length)]!;
      const injected = backend.inject(next?.fault ?? pickFault(backend.supportedFaults(), random), random);
      // a fault that could not start now (an outage while the store is stalled) is due again later
      if (next && !injected) due.push(next);
    }
    for (const backend of backends) await backend.quiesce();
    log(`soak ${config.name}: faults stopped after ${Math.round((Date.now() - started) / 1000)} s, settling`);

    // leave the checks and the teardown time to run before the caller's timeout: no process outlives the soak
    const settleBy = Math.min(Date.now() + config.settleTimeoutMs, started + config.timeoutMs - 20_000);
    while (Date.now() < settleBy && !backends.every((backend) => backend.allClientsDone())) await sleep(200);
    const results: BackendResult[] = [];
    for (const backend of backends) {
      const verifying = Date.now();
      results.push(await backend.verify());
      log(`soak ${config.name}: ${backend.kind} verified in ${((Date.now() - verifying) / 1000).toFixed(1)} s`);
    }

    const sum = (pick: (result: BackendResult) => number) => results.reduce((total, r) => total + pick(r), 0);
    const outcomes: Record<string, number> = {};
    for (const result of results) {
      for (const [status, n] of Object.entries(result.outcomes)) outcomes[status] = (outcomes[status] ?? 0) + n;
    }
    const faults = {
      serverKills: sum((r) => r.serverKills),
      clientKills: sum((r) => r.clientKills),
      clientPauses: sum((r) => r.clientPauses),
      resumeRaces: sum((r) => r.resumeRaces),
      clockSteps: sum((r) => r.clockSteps),
      connectionDrops: sum((r) => r.connectionDrops),
      databaseOutages: sum((r) => r.databaseOutages),
      storeStalls: sum((r) => r.storeStalls),
      entrantsAfterStall: sum((r) => r.entrantsAfterStall),
      droppedBefore: sum((r) => r.proxy.droppedBefore),
      droppedAfter: sum((r) => r.proxy.droppedAfter),
      delayed: sum((r) => r.proxy.delayed),
      stalled: sum((r) => r.proxy.stalled),
      total: 0,
    };
    faults.total =
      faults.serverKills +
      faults.clientKills +
      faults.clientPauses +
      faults.resumeRaces +
      faults.clockSteps +
      faults.connectionDrops +
      faults.databaseOutages +
      faults.storeStalls +
      faults.entrantsAfterStall +
      faults.droppedBefore +
      faults.droppedAfter +
      faults.delayed +
      faults.stalled;
    const report: SoakReport = {
      config: config.name,
      seed: config.seed,
      durationMs: Date.now() - started,
      submitted: sum((r) => r.submitted),
      toolCalls: sum((r) => r.toolCalls),
      outcomes,
      faults,
      recovered: {
        total: sum((r) => r.recovered.size),
        resubmitted: sum((r) => r.resubmitted),
        resumedByAnotherClient: sum((r) => r.resumedByAnotherClient),
        takenOverAfterServerKill: sum((r) => r.takenOver),
        takenOverByAnotherWorker: sum((r) => r.takenOverByAnotherWorker),
        fleetOrphans: sum((r) => r.fleetOrphans),
        fleetTakenUp: sum((r) => r.fleetTakenUp),
      },
      reaskedAfterCrash: sum((r) => r.reaskedAfterCrash),
      reaskedAfterPause: sum((r) => r.reaskedAfterPause),
      namespacedStarts: sum((r) => r.namespacedStarts),
      serverLog: results.flatMap((r) =>
        [...r.serverLog].sort((a, b) => b[1] - a[1]).map(([line, n]) => `${r.kind}: ${n}x ${line.slice(0, 300)}`),
      ),
      lost: results.flatMap((r) => r.lost.map((line) => `${r.kind}: ${line}`)),
      violations: results.flatMap((r) => r.violations.map((line) => `${r.kind}: ${line}`)),
      backends: results.map((r) => ({
        kind: r.kind,
        submitted: r.submitted,
        faults:
          r.serverKills +
          r.clientKills +
          r.clientPauses +
          r.resumeRaces +
          r.clockSteps +
          r.connectionDrops +
          r.databaseOutages +
          r.storeStalls +
          r.entrantsAfterStall +
          r.proxyFaults,
        recovered: r.recovered.size,
        lost: r.lost.length,
        badGateway: r.badGateway,
      })),
      dir,
    };
    return report;
  } finally {
    const stopping = Date.now();
    await Promise.allSettled(backends.map((backend) => backend.stop()));
    await Promise.allSettled(clusters.map((cluster) => cluster.stop()));
    log(`soak ${config.name}: stopped in ${((Date.now() - stopping) / 1000).toFixed(1)} s`);
    if (process.env['SOAK_KEEP'] === '1') log(`soak ${config.name}: files kept in ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

/** The report as printed: details first, the four counts the issue asks for as the last lines. */
export function formatReport(report: SoakReport): string[] {
  const { faults, recovered } = report;
  const lines = [
    `soak ${report.config} (seed ${report.seed}) took ${(report.durationMs / 1000).toFixed(1)} s`,
    ...report.backends.map(
      (b) =>
        `  ${b.kind}: submitted ${b.submitted}, faults ${b.faults}, recovered ${b.recovered}, lost ${b.lost}; ` +
        `502 from the proxy: ${JSON.stringify(b.badGateway)}`,
    ),
    `  outcomes: ${Object.entries(report.outcomes)
      .sort()
      .map(([status, n]) => `${status} ${n}`)
      .join(
        ', ',
      )}; tools/call sent ${report.toolCalls}; inputs re-asked after a client died mid-answer ${report.reaskedAfterCrash}, ` +
      `after a pause past its lease ${report.reaskedAfterPause}; instance starts in a PID namespace of their own ` +
      `${report.namespacedStarts}`,
    ...report.serverLog.slice(0, 10).map((line) => `  server log ${line}`),
    ...report.violations.map((line) => `  VIOLATION ${line}`),
    ...report.lost.map((line) => `  LOST ${line}`),
    `submitted: ${report.submitted}`,
    `faults injected: ${faults.total} (server processes killed ${faults.serverKills}, client processes killed ${faults.clientKills}, ` +
      `client processes paused past their lease ${faults.clientPauses}, second processes racing resumeAll ${faults.resumeRaces}, ` +
      `client clock steps ${faults.clockSteps}, PostgreSQL connection drops ${faults.connectionDrops}, ` +
      `PostgreSQL outages ${faults.databaseOutages}, stores stalled past a lease (PostgreSQL frozen, SQLite write lock held) ${faults.storeStalls}, ` +
      `fresh instances and resumeAll processes started the moment the store answered again ${faults.entrantsAfterStall}, ` +
      `connections dropped before the server ${faults.droppedBefore}, answers dropped after it ${faults.droppedAfter}, ` +
      `answers delayed ${faults.delayed}, answers stalled past the client's timeout ${faults.stalled})`,
    `recovered: ${recovered.total} (resubmitted after a lost answer ${recovered.resubmitted}, resumed by a restarted client ` +
      `${recovered.resumedByAnotherClient}, re-run or failed as interrupted after a server kill or a stall ${recovered.takenOverAfterServerKill}, ` +
      `closed out by another worker of a fleet ${recovered.takenOverByAnotherWorker}; records a killed fleet worker ` +
      `followed ${recovered.fleetOrphans}, taken up by the others ${recovered.fleetTakenUp})`,
    `lost: ${report.lost.length}`,
  ];
  return lines;
}

// ---- one backend: its servers, its proxy, its clients ----------------------------------------------------------

interface ClientSlot {
  index: number;
  principal: string;
  /** The task owner the server records for this principal's bearer token. */
  owner: string;
  token: string;
  ledger: string;
  plan: Job[];
  planFile: string;
  eventLog: string;
  askedLog: string;
  child: ChildProcess | undefined;
  /** Second processes racing this client's resumeAll() on its ledger, while they run. */
  racers: Set<ChildProcess>;
  /** The stepped wall clock every process of this slot runs on, for the one slot per backend that has one. */
  clock: FakeClock | undefined;
  done: boolean;
  stderr: string;
}

interface StoreRow {
  taskId: string;
  owner: string;
  toolName: string;
  status: string;
  result: Record<string, unknown> | undefined;
  error: Record<string, unknown> | undefined;
  attempt: number;
  idempotencyKey: string | undefined;
}

interface BackendResult {
  kind: BackendKind;
  submitted: number;
  toolCalls: number;
  outcomes: Record<string, number>;
  serverKills: number;
  clientKills: number;
  clientPauses: number;
  resumeRaces: number;
  clockSteps: number;
  connectionDrops: number;
  databaseOutages: number;
  storeStalls: number;
  entrantsAfterStall: number;
  namespacedStarts: number;
  proxy: ChaosProxy['counts'];
  proxyFaults: number;
  badGateway: Record<string, number>;
  recovered: Set<string>;
  resubmitted: number;
  resumedByAnotherClient: number;
  takenOver: number;
  takenOverByAnotherWorker: number;
  fleetOrphans: number;
  fleetTakenUp: number;
  reaskedAfterCrash: number;
  reaskedAfterPause: number;
  lost: string[];
  violations: string[];
  /** What the instances wrote to stderr besides their start line, ids masked, with how often. */
  serverLog: Map<string, number>;
}

class BackendRun {
  private readonly proxy: ChaosProxy;
  private proxyUrl = '';
  private readonly servers: Array<ServeProcess | undefined> = [];
  /** Every instance ever started, for its stderr. */
  private readonly started: ServeProcess[] = [];
  private readonly clients: ClientSlot[] = [];
  private readonly killedServerPids = new Set<number>();
  /** The CLOSEOUT_RUN_INSTANCE of every killed instance: pids repeat across PID namespaces, these never do. */
  private readonly killedServerInstances = new Set<string>();
  private readonly instanceOf = new Map<ServeProcess, string>();
  private instancesStarted = 0;
  private namespacedStarts = 0;
  private readonly killedClientPids = new Set<number>();
  private readonly pausedClientPids = new Set<number>();
  private resumeRaces = 0;
  private clockSteps = 0;
  private connectionDrops = 0;
  private databaseOutages = 0;
  private outageRunning = false;
  private storeStalls = 0;
  private entrantsAfterStall = 0;
  private stallRunning = false;
  private readonly restarts = new Set<Promise<void>>();
  private readonly violations: string[] = [];
  private readonly runLog: string;
  /** When each process was killed and started: the timeline to read a violation against. */
  private readonly faultLog: string;
  private startAt = 0;
  private stopping = false;
  /** The fleet's ledger, opened for the fleet's kills (`postgres-fleet`). */
  private fleetLedger: Promise<PostgresLedger> | undefined;
  /** Records killed fleet workers followed when they died, and how many of them the other workers took up. */
  private fleetOrphans = 0;
  private fleetTakenUp = 0;

  constructor(
    readonly kind: BackendKind,
    private readonly dir: string,
    private readonly store: string,
    private readonly config: SoakConfig,
    random: () => number,
    private readonly postgres?: StartedPostgres,
    /** The one PostgreSQL ledger of a fleet's clients (`postgres-fleet`); otherwise each has a SQLite file. */
    private readonly sharedLedger?: string,
  ) {
    mkdirSync(dir, { recursive: true });
    this.runLog = join(dir, 'runs.log');
    this.faultLog = join(dir, 'faults.log');
    this.proxy = new ChaosProxy(config.chaos, random);
    for (let index = 0; index < config.clientsPerBackend; index++) {
      // a fleet's workers share one ledger and one credential: any of them may close out any record
      const principal = sharedLedger ? `${kind}-workers` : `${kind}-client-${index}`;
      this.clients.push({
        index,
        principal,
        owner: `client:${principal}`,
        token: sharedLedger ? `soak-token-${kind}` : `soak-token-${kind}-${index}`,
        ledger: sharedLedger ?? join(dir, `ledger-${index}.db`),
        plan: [],
        planFile: join(dir, `plan-${index}.json`),
        eventLog: join(dir, `events-${index}.log`),
        askedLog: join(dir, `asked-${index}.log`),
        child: undefined,
        racers: new Set(),
        // the first client of each backend lives on a wall clock the injector steps
        clock: index === 0 ? fakeClock('+0') : undefined,
        done: false,
        stderr: '',
      });
    }
  }

  async startServers(): Promise<void> {
    requirePidNamespaces();
    this.proxyUrl = await this.proxy.listen();
    // the first instance creates the store; the others start together, as a deployment would
    this.servers.push(await this.serve(0));
    const others = await Promise.all(
      Array.from({ length: this.config.serversPerBackend - 1 }, (_, i) => this.serve(i + 1)),
    );
    this.servers.push(...others);
    this.route();
  }

  supportedFaults(): FaultKind[] {
    return FAULT_WEIGHTS.map(([fault]) => fault).filter((fault) => this.postgres || !POSTGRES_FAULTS.has(fault));
  }

  /** False when the fault could not start now: the database is already out or stalled. */
  inject(fault: FaultKind, random: () => number): boolean {
    switch (fault) {
      case 'database-outage':
        return this.stopDatabase();
      case 'store-stall':
        return this.stallStore();
    }
    this.injectNow(fault, random);
    return true;
  }

  private injectNow(fault: Exclude<FaultKind, 'database-outage' | 'store-stall'>, random: () => number): void {
    switch (fault) {
      case 'kill-server':
        return this.killServer(random);
      case 'kill-client':
        return this.killClient(random);
      case 'pause-client':
        return this.pauseClient(random);
      case 'resume-race':
        return this.raceResume(random);
      case 'clock-step':
        return this.stepClock(random);
      case 'connection-drops':
        return this.dropConnections();
    }
  }

  startClients(startAt: number, random: () => number): void {
    this.startAt = startAt;
    for (const slot of this.clients) {
      slot.plan = planJobs(`${this.kind}-${slot.index}`, this.config, random);
      writeFileSync(slot.planFile, JSON.stringify(slot.plan));
      this.spawnClient(slot);
    }
  }

  killServer(random: () => number): void {
    const live = this.servers.flatMap((server, index) => (server ? [index] : []));
    if (live.length === 0) return;
    const index = live[Math.floor(random() * live.length)]!;
    const server = this.servers[index]!;
    this.servers[index] = undefined;
    this.killedServerPids.add(server.child.pid!);
    this.killedServerInstances.add(this.instanceOf.get(server)!);
    this.note('kill server', server.child.pid!);
    const restartAfter = 200 + random() * 1_300;
    this.track(
      (async () => {
        await server.kill();
        this.route();
        await sleep(restartAfter);
        this.servers[index] = await this.serve(index);
        this.route();
      })(),
    );
  }

  killClient(random: () => number): void {
    if (this.sharedLedger) return this.killFleetWorker(random);
    const live = this.clients.filter((slot) => slot.child && !slot.done && slot.child.exitCode === null);
    if (live.length === 0) return;
    const slot = live[Math.floor(random() * live.length)]!;
    const child = slot.child!;
    slot.child = undefined;
    this.killedClientPids.add(child.pid!);
    this.note('kill client', child.pid!);
    const restartAfter = 200 + random() * 1_300;
    this.track(
      (async () => {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
        await sleep(restartAfter);
        if (!slot.done) this.spawnClient(slot);
      })(),
    );
  }

  /**
   * A fleet's worker SIGKILLed while it follows records, started again only once the fleet has taken up every one of
   * them (another process holds its lease, or closed it out): what is checked does not hang on which process wins a
   * race. The victim is a worker that follows at least one record (waited for while none does, jobs arrive all through
   * the submission window). A worker exits once its own plan is closed out: when no other one is left running, a
   * process of the fleet that only runs resumeAll() is started to take the records up, as an operator would.
   */
  killFleetWorker(random: () => number): void {
    const live = () => this.clients.filter((slot) => slot.child && !slot.done && slot.child.exitCode === null);
    if (live().length < 2) return;
    this.track(
      (async () => {
        let victim: ClientSlot | undefined;
        let followed: TaskRecord[] = [];
        for (const until = Date.now() + FLEET_VICTIM_WAIT_MS; !victim && Date.now() < until && !this.stopping;) {
          followed = await this.fleetRecordsFollowed();
          victim = shuffle(live(), random).find((slot) =>
            followed.some((record) => holderPid(record) === slot.child?.pid),
          );
          if (!victim) await sleep(200);
        }
        // a worker that follows nothing proves nothing about taking up: no kill this time
        const child = victim?.child;
        if (!victim || !child || live().length < 2) return;
        victim.child = undefined;
        this.killedClientPids.add(child.pid!);
        this.note('kill fleet worker', child.pid!);
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
        // what it followed as it was chosen, read before the kill: a worker in the same PID namespace is proved dead
        // by the kernel, and another takes its records up at once, often before a read after the kill would run
        const orphans = followed.filter((record) => holderPid(record) === child.pid);
        this.fleetOrphans += orphans.length;
        let left = orphans;
        let standby = false;
        for (const until = Date.now() + FLEET_TAKE_UP_WAIT_MS; left.length > 0 && Date.now() < until;) {
          if (this.stopping) return;
          if (!standby && !live().some((slot) => slot !== victim)) {
            standby = true;
            this.spawnRacer(this.clients.find((slot) => slot !== victim)!);
          }
          await sleep(250);
          const still = new Set(
            (await this.fleetRecordsFollowed()).filter((r) => holderPid(r) === child.pid).map((r) => r.recordId),
          );
          left = left.filter((record) => still.has(record.recordId));
        }
        this.fleetTakenUp += orphans.length - left.length;
        if (left.length > 0) {
          this.violations.push(
            `the fleet did not take up ${left.length} of the ${orphans.length} records killed worker ${child.pid} ` +
              `followed within ${FLEET_TAKE_UP_WAIT_MS / 1000} s: ${left.map((r) => r.recordId).join(', ')}`,
          );
        }
        this.note(`fleet took up ${orphans.length - left.length} of ${orphans.length} records`, child.pid!);
        if (!victim.done) this.spawnClient(victim);
      })(),
    );
  }

  /** The shared ledger's records a process follows (`tracking`), read through one connection kept for the soak. */
  private async fleetRecordsFollowed(): Promise<TaskRecord[]> {
    // the harness's own reads go through the database faults it injects (a dropped connection, an outage, a freeze):
    // a read that fails is read again, for as long as a fault lasts
    for (const until = Date.now() + FLEET_TAKE_UP_WAIT_MS; ;) {
      try {
        this.fleetLedger ??= PostgresLedger.open(this.sharedLedger!);
        const records = await (await this.fleetLedger).list({});
        return records.filter((record) => record.localState === 'tracking');
      } catch (error) {
        if (!(await this.fleetLedger?.then(() => true).catch(() => false))) this.fleetLedger = undefined;
        if (this.stopping || Date.now() > until) throw error;
        await sleep(250);
      }
    }
  }

  /** SIGSTOP for longer than the client's lease (a laptop lid, a debugger, a paused container), then SIGCONT. */
  pauseClient(random: () => number): void {
    const live = this.clients.filter((slot) => slot.child && !slot.done && slot.child.exitCode === null);
    if (live.length === 0) return;
    const child = live[Math.floor(random() * live.length)]!.child!;
    const pausedFor = this.config.clientLeaseMs * (1.5 + random());
    this.pausedClientPids.add(child.pid!);
    this.note('pause client', child.pid!);
    this.track(
      (async () => {
        child.kill('SIGSTOP');
        await sleep(pausedFor);
        child.kill('SIGCONT');
        this.note('continue client', child.pid!);
      })(),
    );
  }

  /** A second process on a client's ledger whose resumeAll() runs while the client runs its own. */
  raceResume(random: () => number): void {
    const live = this.clients.filter((slot) => slot.child && !slot.done);
    if (live.length === 0) return;
    this.resumeRaces++;
    this.spawnRacer(live[Math.floor(random() * live.length)]!);
  }

  /** A process on `slot`'s ledger that runs resumeAll(), follows what it took up to its close-out, and exits. */
  private spawnRacer(slot: ClientSlot): void {
    const racer = this.spawnSoakClient(slot, true);
    slot.racers.add(racer);
    this.note(`racer for client ${slot.index} spawned`, racer.pid!);
    let stderr = '';
    racer.stderr!.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4_000)));
    racer.once('exit', (code, signal) => {
      slot.racers.delete(racer);
      if (code !== 0 && !this.stopping) {
        this.violations.push(`the resume racer of client ${slot.index} exited with ${code ?? signal}: ${stderr}`);
      }
    });
  }

  /** Step the wall clock of the slot that has a stepped one, to another offset. */
  stepClock(random: () => number): void {
    const slot = this.clients.find((candidate) => candidate.clock);
    if (!slot?.clock) return;
    const offset = CLOCK_OFFSETS[1 + Math.floor(random() * (CLOCK_OFFSETS.length - 1))]!;
    slot.clock.set(offset);
    this.clockSteps++;
    this.note(`client ${slot.index} clock at ${offset}`, slot.child?.pid ?? 0);
    // and back a few seconds later, so each step is a jump both ways
    this.track(
      (async () => {
        await sleep(2_000 + random() * 3_000);
        slot.clock?.set('+0');
      })(),
    );
  }

  /**
   * Every connection the instances hold to the database, cut at once (a failover, a proxy restart); a fleet's
   * connections to its shared ledger too.
   */
  dropConnections(): void {
    this.connectionDrops++;
    this.note('drop database connections', 0);
    for (const connectionString of [this.store, ...(this.sharedLedger ? [this.sharedLedger] : [])]) {
      this.track(
        (async () => {
          const admin = new pg.Client({ connectionString });
          admin.on('error', () => undefined);
          try {
            await admin.connect();
            await admin.query(
              'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
            );
          } catch {
            // the database is down for an outage right now: nothing to cut
          } finally {
            await admin.end().catch(() => undefined);
          }
        })(),
      );
    }
  }

  /** PostgreSQL stopped for some seconds and started again: instances must neither die nor run anything twice. */
  stopDatabase(): boolean {
    if (!this.postgres || this.outageRunning || this.stallRunning) return false;
    this.outageRunning = true;
    this.databaseOutages++;
    this.note('database outage', 0);
    this.track(
      this.postgres.outage(this.config.databaseOutageMs).finally(() => {
        this.outageRunning = false;
        this.note('database back', 0);
        this.enterAfterStall();
      }),
    );
    return true;
  }

  /**
   * The store answers late instead of failing, for longer than a lease: PostgreSQL frozen (every process SIGSTOPped),
   * or another process holding the SQLite file's write lock. No live holder may lose a task to it.
   */
  stallStore(): boolean {
    if (this.stallRunning || this.outageRunning) return false;
    this.stallRunning = true;
    this.storeStalls++;
    this.note(this.postgres ? 'database frozen' : 'write lock held', 0);
    const stall = async () => {
      if (this.postgres) return this.postgres.freeze(this.config.storeStallMs);
      const lock = await holdWriteLock(this.store);
      await new Promise((resolve) => setTimeout(resolve, this.config.storeStallMs));
      await lock.release();
    };
    this.track(
      stall().finally(() => {
        this.stallRunning = false;
        this.note('store answers again', 0);
        this.enterAfterStall();
      }),
    );
    return true;
  }

  /**
   * The moment the store answers again, after an outage or a stall, leases of live holders have lapsed only because
   * nobody could renew them: a fresh instance starts (its takeover gate closed, as any process started after the
   * stall), and a second process runs resumeAll() on a live client's ledger (on the fleet's shared ledger, the
   * ledger outage itself). Neither may take anything from a live holder: a task run twice or an input asked twice is
   * a violation the checks report. The fresh instance has a slot of its own, past the deployment's: the previous one
   * is killed as it comes in, so instances do not pile up.
   */
  private enterAfterStall(): void {
    if (this.stopping) return;
    this.entrantsAfterStall++;
    const index = this.config.serversPerBackend;
    const previous = this.servers[index];
    if (previous) {
      this.servers[index] = undefined;
      this.killedServerPids.add(previous.child.pid!);
      this.killedServerInstances.add(this.instanceOf.get(previous)!);
      this.route();
    }
    this.note('fresh instance after a stall', previous?.child.pid ?? 0);
    this.track(
      (async () => {
        if (previous) await previous.kill();
        this.servers[index] = await this.serve(index);
        this.route();
      })(),
    );
    const live = this.clients.filter((slot) => slot.child && !slot.done);
    if (live.length > 0) this.spawnRacer(live[this.entrantsAfterStall % live.length]!);
  }

  /** No more faults: the proxy forwards faithfully, and every killed process is back. */
  async quiesce(): Promise<void> {
    this.proxy.chaos = false;
    while (this.restarts.size > 0) await Promise.allSettled([...this.restarts]);
  }

  allClientsDone(): boolean {
    return this.clients.every((slot) => slot.done && slot.racers.size === 0);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.allSettled([...this.restarts]);
    await (await this.fleetLedger?.catch(() => undefined))?.dispose();
    for (const slot of this.clients) {
      slot.child?.kill('SIGKILL');
      for (const racer of slot.racers) racer.kill('SIGKILL');
    }
    // `unshare --fork` ignores SIGTERM while it waits for its child: an instance in its own PID namespace is killed
    // (the wrapper's --kill-child takes the instance with it), the others stop gracefully
    await Promise.allSettled(
      this.servers.map((server) =>
        server && this.instanceOf.get(server)?.endsWith('-ns') ? server.kill() : server?.stop(),
      ),
    );
    await this.proxy.close();
  }

  /** Instance `index`; the second one always runs in a PID namespace of its own, as in a container. */
  private async serve(index: number): Promise<ServeProcess> {
    const grants = new Set(this.clients.map((slot) => `${slot.token}=${slot.principal}`));
    const tokens = [...grants].flatMap((grant) => ['--token', grant]);
    const args = ['--store', this.store, '--lease-ms', String(this.config.serverLeaseMs), ...tokens];
    const namespaced = index === 1;
    for (let attempt = 1; ; attempt++) {
      const instance = `${this.kind}-${++this.instancesStarted}${namespaced ? '-ns' : ''}`;
      try {
        const server = await startServe(
          args,
          this.config.serveStartMs,
          { CLOSEOUT_RUN_LOG: this.runLog, CLOSEOUT_RUN_INSTANCE: instance },
          namespaced ? inNewPidNamespace : undefined,
        );
        this.instanceOf.set(server, instance);
        if (namespaced) this.namespacedStarts++;
        this.started.push(server);
        this.note('server up', server.child.pid!);
        server.child.once('exit', (code, signal) => this.exitedOnItsOwn(server, code ?? signal));
        return server;
      } catch (error) {
        this.violations.push(`closeout serve did not start (attempt ${attempt}): ${String(error).slice(0, 500)}`);
        if (attempt >= 3) throw error;
      }
    }
  }

  private note(what: string, pid: number): void {
    appendFileSync(this.faultLog, `${JSON.stringify({ what, pid, at: Date.now() })}\n`);
  }

  /** A server must die only when the injector kills it: anything else is a crash, reported, and it comes back. */
  private exitedOnItsOwn(server: ServeProcess, how: number | string | null): void {
    const pid = server.child.pid!;
    if (this.killedServerPids.has(pid) || this.stopping) return;
    this.violations.push(`closeout serve (pid ${pid}) exited on its own (${how}): ${server.stderr().slice(-2_000)}`);
    const index = this.servers.indexOf(server);
    if (index < 0) return;
    this.servers[index] = undefined;
    this.route();
    this.track(
      (async () => {
        this.servers[index] = await this.serve(index);
        this.route();
      })(),
    );
  }

  private route(): void {
    this.proxy.backends = this.servers.flatMap((server) => (server ? [server.url] : []));
  }

  private track(work: Promise<void>): void {
    const tracked = work.catch((error: unknown) => {
      this.violations.push(`restarting a process failed: ${String(error)}`);
    });
    this.restarts.add(tracked);
    void tracked.finally(() => this.restarts.delete(tracked));
  }

  private spawnClient(slot: ClientSlot): void {
    if (this.stopping) return;
    const child = this.spawnSoakClient(slot, false);
    slot.child = child;
    this.note(`client ${slot.index} spawned`, child.pid!);
    child.stderr!.on('data', (chunk: Buffer) => (slot.stderr = (slot.stderr + chunk.toString()).slice(-4_000)));
    child.once('exit', (code, signal) => {
      if (code === 0) {
        slot.done = true;
        return;
      }
      if (this.killedClientPids.has(child.pid!) || this.stopping) return;
      // never crashes: anything but exit 0 or our SIGKILL is a broken promise; start it again to carry on
      this.violations.push(`client ${slot.index} (pid ${child.pid}) exited with ${code ?? signal}: ${slot.stderr}`);
      if (slot.child === child) this.spawnClient(slot);
    });
  }

  /** A process of fixtures/soakClient.mjs for this slot, on the slot's clock. */
  private spawnSoakClient(slot: ClientSlot, resumeOnly: boolean): ChildProcess {
    const args = {
      url: this.proxyUrl,
      token: slot.token,
      ledger: slot.ledger,
      plan: slot.planFile,
      eventLog: slot.eventLog,
      askedLog: slot.askedLog,
      startAt: this.startAt,
      leaseMs: this.config.clientLeaseMs,
      requestTimeoutMs: this.config.clientRequestTimeoutMs,
      resumeOnly,
      ...(this.sharedLedger && { takeOverEveryMs: FLEET_TAKE_OVER_EVERY_MS }),
    };
    return spawn(process.execPath, [SOAK_CLIENT, JSON.stringify(args)], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ...slot.clock?.env },
    });
  }

  // ---- the checks --------------------------------------------------------------------------------------------

  async verify(): Promise<BackendResult> {
    const lost: string[] = [];
    const violations = [...this.violations];
    const recovered = new Set<string>();
    const resubmittedJobs = new Set<string>();
    const resumedJobs = new Set<string>();
    const takenOverJobs = new Set<string>();
    const outcomes: Record<string, number> = {};
    let toolCalls = 0;
    let reaskedAfterCrash = 0;
    let reaskedAfterPause = 0;

    const rows = await this.readStore();
    const byKey = new Map(rows.map((row) => [`${row.owner}\0${row.idempotencyKey}`, row]));
    const runs = readJsonLines<{ tool: string; taskId: string | null; attempt: number; instance: string }>(this.runLog);
    const runsByTask = groupBy(runs, (run) => String(run.taskId));
    // runs an instance stopped itself, their leases not renewed in time through a stall (docs/DESIGN.md rule 13)
    const stoppedRuns = new Set(
      this.started.flatMap((server) => stoppedRunsOf(this.instanceOf.get(server)!, server.stderr())),
    );
    const readUrls = this.servers.flatMap((server) => (server ? [server.url] : []));
    const jobIds = new Set<string>();
    const takenOverByAnotherWorker = new Set<string>();

    // every process's asks and events, whichever client's log holds them: in a fleet, any process may close out,
    // and ask for, the records another one submitted
    const asked = this.clients.flatMap((slot) =>
      readJsonLines<{ taskId: string; key: string; pid: number; previouslyAsked: boolean }>(slot.askedLog),
    );
    const eventsBySlot = this.clients.map((slot) =>
      readJsonLines<{ event: string; pid: number; jobId?: string }>(slot.eventLog),
    );
    const events = eventsBySlot.flat();
    const slotOfPid = new Map(eventsBySlot.flatMap((slotEvents, index) => slotEvents.map((e) => [e.pid, index])));
    // no input asked twice, unless the process asked died before the answer was stored (then the handler is
    // told previouslyAsked, and a person would see that)
    for (const asks of groupBy(asked, (ask) => `${ask.taskId} ${ask.key}`).values()) {
      for (const [i, ask] of asks.entries()) {
        if (i === 0) continue;
        const before = asks[i - 1]!;
        if (ask.previouslyAsked && this.killedClientPids.has(before.pid)) reaskedAfterCrash++;
        else if (ask.previouslyAsked && this.pausedClientPids.has(before.pid)) reaskedAfterPause++;
        else violations.push(`input ${ask.taskId} ${ask.key} asked again by pid ${ask.pid} after pid ${before.pid}`);
      }
    }
    const askersOf = (taskId: string) => new Set(asked.filter((ask) => ask.taskId === taskId).map((a) => a.pid));
    const sharedRecords = this.sharedLedger ? await readLedger(this.sharedLedger) : undefined;

    for (const slot of this.clients) {
      if (!slot.done) violations.push(`client ${slot.index} did not close out its plan in time: ${slot.stderr}`);
      if (slot.racers.size > 0) violations.push(`a resume racer of client ${slot.index} did not finish in time`);
      const planned = new Set(slot.plan.map((job) => job.jobId));
      const records = sharedRecords
        ? sharedRecords.filter((record) => planned.has(record.idempotencyKey ?? ''))
        : existsSync(slot.ledger)
          ? await readLedger(slot.ledger)
          : [];
      toolCalls += records.filter((record) => record.sentAt !== undefined).length;

      for (const job of slot.plan) {
        const chain = records.filter((record) => record.idempotencyKey === job.jobId);
        const current = chain.find((record) => record.supersededBy === undefined);
        // the key on the wire is derived from the job id with the ledger's secret; a resubmission reuses it
        const wireKey = chain[0]?.wireIdempotencyKey ?? job.jobId;
        jobIds.add(`${slot.owner}\0${wireKey}`);
        const row = byKey.get(`${slot.owner}\0${wireKey}`);
        const problem = agreement(job, current, row);
        if (problem) {
          lost.push(`${job.jobId} (${job.kind}): ${problem}`);
          continue;
        }
        const task = row!;
        outcomes[task.status] = (outcomes[task.status] ?? 0) + 1;
        const wrong = unexpectedOutcome(job, task, askersOf(task.taskId));
        if (wrong) violations.push(`${job.jobId} (${job.kind}, task ${task.taskId}): ${wrong}`);
        violations.push(...this.checkRuns(job, task, runsByTask.get(task.taskId) ?? [], stoppedRuns));

        // two reads, on two instances, agree with each other and with the store
        const reads = await Promise.all(
          [0, 1].map((i) =>
            rpc(
              readUrls[i % readUrls.length]!,
              'tasks/get',
              { taskId: task.taskId },
              { token: slot.token, timeoutMs: 5_000 },
            ).catch((error: unknown) => {
              violations.push(`${job.jobId}: tasks/get on ${readUrls[i % readUrls.length]} failed: ${String(error)}`);
              return { result: undefined };
            }),
          ),
        );
        const [first, second] = reads.map((read) => comparable(read.result)) as [unknown, unknown];
        if (!isDeepStrictEqual(first, second)) {
          violations.push(`${job.jobId}: two reads differ: ${JSON.stringify(first)} vs ${JSON.stringify(second)}`);
        } else if (!isDeepStrictEqual(pick(first, ['status', 'result', 'error']), storeView(task))) {
          violations.push(`${job.jobId}: tasks/get says ${JSON.stringify(first)}, the store ${JSON.stringify(task)}`);
        }

        // what broke this job's flow and was recovered from
        const jobEvents = events.filter((event) => event.jobId === job.jobId);
        const firstSubmit = jobEvents.find((e) => e.event === 'submitted' || e.event === 'resubmitting');
        const firstOutcome = jobEvents.find((e) => e.event === 'outcome');
        if (chain.length > 1) resubmittedJobs.add(job.jobId);
        // a fleet: another client's process followed the record to its end (this one was killed or paused)
        if (jobEvents.some((e) => e.event === 'closed' && slotOfPid.get(e.pid) !== slot.index)) {
          takenOverByAnotherWorker.add(job.jobId);
        }
        if (
          jobEvents.some((e) => e.event === 'resumed') ||
          (firstSubmit && firstOutcome && firstSubmit.pid !== firstOutcome.pid)
        ) {
          resumedJobs.add(job.jobId);
        }
        const interrupted = (task.error?.['message'] as string | undefined)?.startsWith(INTERRUPTED_MESSAGE);
        if (task.attempt > 1 || interrupted) takenOverJobs.add(job.jobId);
      }
    }
    for (const set of [resubmittedJobs, resumedJobs, takenOverJobs, takenOverByAnotherWorker]) {
      for (const jobId of set) recovered.add(jobId);
    }

    // nothing on the server that nobody submitted, and nothing left open
    for (const row of rows) {
      if (!jobIds.has(`${row.owner}\0${row.idempotencyKey}`)) {
        violations.push(`task ${row.taskId} (${row.toolName}, key ${row.idempotencyKey}) matches no submission`);
      }
      if (row.status === 'working' || row.status === 'input_required') {
        violations.push(`task ${row.taskId} (${row.toolName}) is still ${row.status}`);
      }
    }
    for (const run of runs) {
      if (run.taskId === null || !rows.some((row) => row.taskId === run.taskId)) {
        violations.push(`a ${run.tool} handler ran for task ${run.taskId}, which the store does not hold`);
      }
    }

    return {
      kind: this.kind,
      submitted: this.clients.reduce((n, slot) => n + slot.plan.length, 0),
      toolCalls,
      outcomes,
      serverKills: this.killedServerPids.size,
      clientKills: this.killedClientPids.size,
      clientPauses: this.pausedClientPids.size,
      resumeRaces: this.resumeRaces,
      clockSteps: this.clockSteps,
      connectionDrops: this.connectionDrops,
      databaseOutages: this.databaseOutages,
      storeStalls: this.storeStalls,
      entrantsAfterStall: this.entrantsAfterStall,
      namespacedStarts: this.namespacedStarts,
      proxy: { ...this.proxy.counts },
      proxyFaults: this.proxy.faults,
      badGateway: Object.fromEntries(this.proxy.badGatewayCauses),
      recovered,
      resubmitted: resubmittedJobs.size,
      resumedByAnotherClient: resumedJobs.size,
      takenOver: takenOverJobs.size,
      takenOverByAnotherWorker: takenOverByAnotherWorker.size,
      fleetOrphans: this.fleetOrphans,
      fleetTakenUp: this.fleetTakenUp,
      reaskedAfterCrash,
      reaskedAfterPause,
      lost,
      violations,
      serverLog: this.serverLog(),
    };
  }

  private serverLog(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const server of this.started) {
      for (const line of server.stderr().split('\n')) {
        if (line.length === 0 || line.startsWith('closeout serve: ')) continue;
        const masked = line.replace(/[A-Za-z0-9_-]{32}/g, '<taskId>').replace(/\d{4,}/g, '<n>');
        counts.set(masked, (counts.get(masked) ?? 0) + 1);
      }
    }
    return counts;
  }

  /**
   * Runs a handler may have: a non-resumable tool once; a resumable one once per attempt, the store's attempt the
   * last, and every earlier attempt in a server process that was SIGKILLed (never two live instances at once).
   */
  /** `stoppedRuns`: `instance taskId attempt` of every run its instance stopped because its lease was not renewed. */
  private checkRuns(
    job: Job,
    task: StoreRow,
    runs: Array<{ attempt: number; instance: string }>,
    stoppedRuns: Set<string>,
  ): string[] {
    const problems: string[] = [];
    const where = `${job.jobId} (${task.toolName}, task ${task.taskId})`;
    if (runs.length === 0 && task.status === 'completed') problems.push(`${where} completed without a handler run`);
    if (!RESUMABLE_TOOLS.has(task.toolName)) {
      if (runs.length > 1) problems.push(`${where} is not resumable but its handler ran ${runs.length} times`);
      return problems;
    }
    const sorted = [...runs].sort((a, b) => a.attempt - b.attempt);
    for (const [i, run] of sorted.entries()) {
      if (i > 0 && sorted[i - 1]!.attempt === run.attempt) problems.push(`${where} ran attempt ${run.attempt} twice`);
      if (run.attempt > task.attempt)
        problems.push(`${where} ran attempt ${run.attempt}, the store says ${task.attempt}`);
      const stopped = stoppedRuns.has(`${run.instance} ${task.taskId} ${run.attempt}`);
      if (i < sorted.length - 1 && !this.killedServerInstances.has(run.instance) && !stopped) {
        problems.push(`${where} re-ran after attempt ${run.attempt}, while its instance ${run.instance} was alive`);
      }
    }
    return problems;
  }

  private async readStore(): Promise<StoreRow[]> {
    const columns = 'task_id, owner, tool_name, status, result, error, attempt, idempotency_key';
    type Raw = {
      task_id: string;
      owner: string;
      tool_name: string;
      status: string;
      result: string | null;
      error: string | null;
      attempt: number;
      idempotency_key: string | null;
    };
    let raw: Raw[];
    if (this.kind === 'sqlite') {
      const db = openDatabase(this.store, { readonly: true });
      try {
        raw = db.prepare(`SELECT ${columns} FROM tasks`).all() as Raw[];
      } finally {
        db.close();
      }
    } else {
      const client = new pg.Client({ connectionString: this.store });
      await client.connect();
      try {
        raw = (await client.query<Raw>(`SELECT ${columns} FROM closeout_tasks`)).rows;
      } finally {
        await client.end();
      }
    }
    return raw.map((row) => ({
      taskId: row.task_id,
      owner: row.owner,
      toolName: row.tool_name,
      status: row.status,
      result: row.result === null ? undefined : (JSON.parse(row.result) as Record<string, unknown>),
      error: row.error === null ? undefined : (JSON.parse(row.error) as Record<string, unknown>),
      attempt: Number(row.attempt),
      idempotencyKey: row.idempotency_key ?? undefined,
    }));
  }
}

/** Why the client's record and the server's row do not tell the same story, or undefined when they do. */
function agreement(job: Job, record: TaskRecord | undefined, row: StoreRow | undefined): string | undefined {
  if (!record) return 'no ledger record';
  if (record.localState !== 'terminal') {
    return `the ledger record is ${record.localState} (${record.terminalReason ?? record.lastError?.message ?? ''})`;
  }
  if (!record.taskId) return `the ledger record ended without a task: ${record.terminalReason}`;
  if (!row) return `the store holds no task for key ${job.jobId}`;
  if (row.taskId !== record.taskId) return `the ledger has task ${record.taskId}, the store ${row.taskId}`;
  if (record.status !== row.status) return `the ledger says ${record.status}, the store ${row.status}`;
  if (!isDeepStrictEqual(withoutResultType(record.result), withoutResultType(row.result))) {
    return `results differ: ledger ${JSON.stringify(record.result)}, store ${JSON.stringify(row.result)}`;
  }
  if (!isDeepStrictEqual(record.error, row.error)) {
    return `errors differ: ledger ${JSON.stringify(record.error)}, store ${JSON.stringify(row.error)}`;
  }
  return undefined;
}

/** What each kind of job must end as. */
/** `instance taskId attempt` of each run a `closeout serve`'s activity log says it stopped for an unrenewed lease. */
function stoppedRunsOf(instance: string, stderr: string): string[] {
  const stopped = /^closeout serve: task (\S+) stopped here \([^,]*, attempt (\d+)\)/gm;
  return [...stderr.matchAll(stopped)].map(([, taskId, attempt]) => `${instance} ${taskId} ${attempt}`);
}

function unexpectedOutcome(job: Job, row: StoreRow, askers: Set<number>): string | undefined {
  const text = ((row.result?.['content'] as Array<{ text?: string }> | undefined)?.[0]?.text ?? '') as string;
  const errorMessage = String(row.error?.['message'] ?? '');
  const interrupted = row.status === 'failed' && errorMessage === INTERRUPTED_MESSAGE;
  switch (job.kind) {
    case 'fast':
    case 'slow': {
      const structured = row.result?.['structuredContent'];
      const expected = { processed: job.args['items'], attempt: row.attempt };
      if (row.status === 'completed' && isDeepStrictEqual(structured, expected)) return undefined;
      return `expected completed with ${JSON.stringify(expected)}, got ${row.status} ${JSON.stringify(row.result ?? row.error)}`;
    }
    case 'stream':
      if (row.status === 'completed' && text === `Exported a report of ${String(job.args['pages'])} pages`) return;
      if (interrupted) return undefined;
      return `expected completed or interrupted, got ${row.status} ${JSON.stringify(row.result ?? row.error)}`;
    case 'input': {
      const match = /^Deployed to (\S+) \(answered by (\d+)\)$/.exec(text);
      if (row.status !== 'completed' || !match || match[1] !== job.args['env']) {
        return `expected a completed deploy, got ${row.status} ${JSON.stringify(row.result ?? row.error)}`;
      }
      // the answer the server used came from a process that was asked
      return askers.has(Number(match[2])) ? undefined : `answered by pid ${match[2]}, which was never asked`;
    }
    case 'failing':
      if (row.status === 'failed' && (errorMessage === 'Upstream API rate limit exceeded' || interrupted)) return;
      return `expected failed, got ${row.status} ${JSON.stringify(row.result ?? row.error)}`;
    case 'cancelled':
      return row.status === 'cancelled' ? undefined : `expected cancelled, got ${row.status}`;
  }
}

// ---- plans -----------------------------------------------------------------------------------------------------

function planJobs(prefix: string, config: SoakConfig, random: () => number): Job[] {
  const jobs: Job[] = [];
  const totalWeight = KIND_WEIGHTS.reduce((n, [, w]) => n + w, 0);
  for (let n = 0; n < config.jobsPerClient; n++) {
    let roll = random() * totalWeight;
    const kind = KIND_WEIGHTS.find(([, w]) => (roll -= w) < 0)?.[0] ?? 'fast';
    const jobId = `job-${prefix}-${n}`;
    // a steady stream: evenly spread, with a little jitter
    const at = Math.round(((n + random()) / config.jobsPerClient) * config.submitForMs);
    const int = (from: number, to: number) => from + Math.floor(random() * (to - from + 1));
    switch (kind) {
      case 'fast':
        jobs.push({ jobId, kind, at, tool: 'batch_job', args: { items: 1, stepMs: 0 } });
        break;
      case 'slow':
        jobs.push({ jobId, kind, at, tool: 'batch_job', args: { items: int(4, 12), stepMs: 200 } });
        break;
      case 'stream':
        jobs.push({ jobId, kind, at, tool: 'export_report', args: { pages: int(3, 10), pageMs: 200 } });
        break;
      case 'input':
        jobs.push({ jobId, kind, at, tool: 'approve_deploy', args: { env: jobId, deployMs: int(50, 500) } });
        break;
      case 'failing':
        jobs.push({ jobId, kind, at, tool: 'flaky_upstream', args: {} });
        break;
      case 'cancelled':
        // long enough that only a cancel ends it: 1000 steps of 100 ms
        jobs.push({
          jobId,
          kind,
          at,
          tool: 'batch_job',
          args: { items: 1000, stepMs: 100 },
          cancelAfterMs: int(200, 2_000),
        });
        break;
    }
  }
  return jobs;
}

// ---- small pieces ----------------------------------------------------------------------------------------------

async function readLedger(location: string): Promise<TaskRecord[]> {
  const ledger = location.startsWith('postgres') ? await PostgresLedger.open(location) : new SqliteLedger(location);
  try {
    return await ledger.list({});
  } finally {
    await ledger.dispose();
  }
}

function readJsonLines<T>(path: string): T[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as T);
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) groups.set(key(item), [...(groups.get(key(item)) ?? []), item]);
  return groups;
}

function withoutResultType(value: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  const { resultType: _resultType, ...rest } = value;
  return rest;
}

/** A tasks/get answer without what may rightly change between two reads of a finished task (its poll hint). */
function comparable(result: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!result) return undefined;
  const { pollIntervalMs: _pollIntervalMs, resultType: _resultType, ...rest } = result;
  return { ...rest, ...(rest['result'] !== undefined && { result: withoutResultType(rest['result'] as never) }) };
}

function storeView(row: StoreRow): Record<string, unknown> {
  return {
    status: row.status,
    ...(row.result !== undefined && { result: row.result }),
    ...(row.error !== undefined && { error: row.error }),
  };
}

function pick(value: unknown, keys: string[]): Record<string, unknown> {
  const source = (value ?? {}) as Record<string, unknown>;
  return Object.fromEntries(keys.filter((key) => source[key] !== undefined).map((key) => [key, source[key]]));
}

function pickFault(faults: FaultKind[], random: () => number): FaultKind {
  const weighted = FAULT_WEIGHTS.filter(([fault]) => faults.includes(fault));
  let roll = random() * weighted.reduce((n, [, w]) => n + w, 0);
  return weighted.find(([, w]) => (roll -= w) < 0)?.[0] ?? 'kill-server';
}

/** A seeded Fisher-Yates shuffle. */
/** The pid in a record's lease holder (`host:pid:...`, src/shared/lease/leaseHolder.ts). */
function holderPid(record: TaskRecord): number | undefined {
  const pid = /^[^:]*:(\d+):/.exec(record.leaseHolder ?? '')?.[1];
  return pid === undefined ? undefined : Number(pid);
}

function shuffle<T>(items: T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** A small seeded PRNG (mulberry32): the same seed gives the same plans and the same fault choices. */
function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
