/**
 * A loopback HTTP proxy in front of a changing set of `closeout serve` instances that misbehaves on purpose, as a
 * flaky network and a plain load balancer would: round-robin with no affinity (an instance that refuses the
 * connection is skipped), and, while `chaos` is on, a POST may have its connection dropped before it reaches an
 * instance, or after the instance answered (the request took effect, the answer is lost), or its answer delayed,
 * sometimes past the client's request timeout.
 */
import type { IncomingHttpHeaders, IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ChaosRates {
  /** Share of POSTs whose connection is dropped before they are forwarded. */
  dropBefore: number;
  /** Share of POSTs forwarded, answered, and then dropped instead of answered. */
  dropAfter: number;
  /** Share of answers held back for up to `delayMaxMs`. */
  delay: number;
  delayMaxMs: number;
  /** Share of answers held back for `stallMs` (set it past the client's request timeout). */
  stall: number;
  stallMs: number;
}

export interface ChaosCounts {
  forwarded: number;
  droppedBefore: number;
  droppedAfter: number;
  delayed: number;
  stalled: number;
  /** No instance took the connection, or the one that did died before answering. */
  badGateway: number;
}

type Fault = 'dropBefore' | 'dropAfter' | 'delay' | 'stall';

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** Headers that belong to one connection, not to the message: never copied across the proxy. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'host', 'upgrade']);

export class ChaosProxy {
  /** The instance URLs requests go to (`http://127.0.0.1:PORT/mcp`); replace it as instances die and come back. */
  backends: string[] = [];
  /** Faults are injected only while this is true. */
  chaos = true;
  readonly counts: ChaosCounts = {
    forwarded: 0,
    droppedBefore: 0,
    droppedAfter: 0,
    delayed: 0,
    stalled: 0,
    badGateway: 0,
  };
  /** Why requests got a 502, by error code. */
  readonly badGatewayCauses = new Map<string, number>();
  private readonly server: Server;
  private next = 0;

  constructor(
    private readonly rates: ChaosRates,
    private readonly random: () => number,
  ) {
    this.server = createServer((req, res) => {
      // a client that gave up (its timeout) closes the socket under us: nothing to do about it
      req.on('error', () => undefined);
      res.on('error', () => undefined);
      void this.handle(req, res).catch(() => res.destroy());
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', () => resolve()));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/mcp`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Faults injected so far. */
  get faults(): number {
    const { droppedBefore, droppedAfter, delayed, stalled } = this.counts;
    return droppedBefore + droppedAfter + delayed + stalled;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const fault = this.chaos && req.method === 'POST' ? this.pickFault() : undefined;
    if (fault === 'dropBefore') {
      this.counts.droppedBefore++;
      req.socket.destroy();
      return;
    }
    const answer = await this.forward(req, body);
    if (!answer) {
      this.counts.badGateway++;
      res.writeHead(502, { 'content-type': 'text/plain' }).end('no instance answered\n');
      return;
    }
    this.counts.forwarded++;
    if (fault === 'dropAfter') {
      this.counts.droppedAfter++;
      req.socket.destroy();
      return;
    }
    if (fault === 'delay') {
      this.counts.delayed++;
      await sleep(this.random() * this.rates.delayMaxMs);
    } else if (fault === 'stall') {
      this.counts.stalled++;
      await sleep(this.rates.stallMs);
    }
    if (req.socket.destroyed) return;
    const headers = Object.fromEntries(Object.entries(answer.headers).filter(([name]) => !HOP_BY_HOP.has(name)));
    res.writeHead(answer.status, headers).end(answer.body);
  }

  private pickFault(): Fault | undefined {
    let roll = this.random();
    for (const fault of ['dropBefore', 'dropAfter', 'delay', 'stall'] as const) {
      if (roll < this.rates[fault]) return fault;
      roll -= this.rates[fault];
    }
    return undefined;
  }

  /** One try per instance at most, moving on only when the connection was refused (the request never arrived). */
  private async forward(req: IncomingMessage, body: Buffer): Promise<Answer | undefined> {
    const backends = [...this.backends];
    for (let tries = 0; tries < backends.length; tries++) {
      const target = new URL(backends[this.next++ % backends.length]!);
      try {
        return await exchange(target, req, body);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code ?? String(error);
        if (code !== 'ECONNREFUSED') {
          this.badGatewayCauses.set(code, (this.badGatewayCauses.get(code) ?? 0) + 1);
          return undefined;
        }
      }
    }
    this.badGatewayCauses.set('no instance up', (this.badGatewayCauses.get('no instance up') ?? 0) + 1);
    return undefined;
  }
}

/** One request on a fresh connection (no pooled socket to an instance that died since), the answer read whole. */
function exchange(target: URL, req: IncomingMessage, body: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => !HOP_BY_HOP.has(name)));
    const upstream = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: req.url ?? target.pathname,
        method: req.method,
        headers: { ...headers, 'content-length': String(body.length) },
        agent: false,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', reject);
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 502, headers: response.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    upstream.on('error', reject);
    upstream.end(body);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
