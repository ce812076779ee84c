/**
 * A round-robin load balancer in front of several `closeout serve` instances, with nothing special: no affinity, a
 * backend that refuses connections is skipped. Answers are streamed through (a `subscriptions/listen` stream stays
 * open as long as the client keeps it), and the task ids the backends create are noted with the backend's index.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** How much of an answer is scanned for a created task id: a CreateTaskResult is small. */
const SCANNED_BYTES = 64 * 1024;

export class RoundRobinProxy {
  readonly server: Server;
  /** Which backend answered each tools/call that created a task. */
  readonly createdOn = new Map<string, number>();
  readonly served: number[];
  private next = 0;

  constructor(private readonly backends: string[]) {
    this.served = backends.map(() => 0);
    this.server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const body = Buffer.concat(chunks);
      // the client hung up (a stream it no longer wants): stop reading the backend too
      const hangUp = new AbortController();
      res.once('close', () => hangUp.abort());
      for (let tries = 0; tries < this.backends.length; tries++) {
        const index = this.next++ % this.backends.length;
        let upstream: Response;
        try {
          const headers = Object.fromEntries(
            Object.entries(req.headers).filter(
              ([k, v]) => typeof v === 'string' && k !== 'host' && k !== 'content-length',
            ),
          ) as Record<string, string>;
          upstream = await fetch(this.backends[index]!, {
            method: req.method ?? 'POST',
            headers,
            signal: hangUp.signal,
            ...(req.method === 'POST' && { body }),
          });
        } catch {
          if (hangUp.signal.aborted) return;
          // connection refused: the backend is down, try the next one as a load balancer would
          continue;
        }
        this.served[index]!++;
        const responseHeaders = Object.fromEntries(upstream.headers.entries());
        delete responseHeaders['content-length'];
        delete responseHeaders['content-encoding'];
        res.writeHead(upstream.status, responseHeaders);
        let scanned = '';
        try {
          for await (const chunk of upstream.body ?? []) {
            const bytes = Buffer.from(chunk as Uint8Array);
            if (scanned.length < SCANNED_BYTES) scanned += bytes.toString();
            res.write(bytes);
          }
        } catch {
          // the backend died mid-answer or the client hung up: end what was sent, as a load balancer would
        }
        const taskId = /"resultType":"task","taskId":"([^"]+)"|"taskId":"([^"]+)"[^}]*"resultType":"task"/.exec(
          scanned,
        );
        if (taskId) this.createdOn.set((taskId[1] ?? taskId[2])!, index);
        res.end();
        return;
      }
      res.writeHead(502).end();
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', () => resolve()));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/mcp`;
  }

  close(): void {
    this.server.closeAllConnections();
    this.server.close();
  }
}
