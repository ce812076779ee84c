/**
 * `closeout serve --metrics-port`: the server's metrics (docs/operations.md, "Observability") in the Prometheus text format on a
 * port of their own. The OpenTelemetry SDK and its Prometheus exporter are optional dependencies of the package,
 * loaded only here: the library itself depends on the OpenTelemetry API alone.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

import type { MeterProvider } from '@opentelemetry/api';
import type * as PrometheusExporterModule from '@opentelemetry/exporter-prometheus';
import type * as ResourcesModule from '@opentelemetry/resources';
import type * as SdkMetricsModule from '@opentelemetry/sdk-metrics';

import { CliError } from '../cliError.js';

export interface MetricsEndpoint {
  url: string;
  meterProvider: MeterProvider;
  close(): Promise<void>;
}

export async function serveMetrics(port: number, host: string, serviceName: string): Promise<MetricsEndpoint> {
  let sdk: typeof SdkMetricsModule;
  let prometheus: typeof PrometheusExporterModule;
  let resources: typeof ResourcesModule;
  try {
    sdk = await import('@opentelemetry/sdk-metrics');
    prometheus = await import('@opentelemetry/exporter-prometheus');
    // a dependency of both: there whenever they are
    resources = await import('@opentelemetry/resources');
  } catch (error) {
    throw new CliError(
      `--metrics-port needs the optional dependencies @opentelemetry/sdk-metrics and @opentelemetry/exporter-prometheus, which are not installed (${(error as Error).message}): install them beside closeout, or leave out --metrics-port`,
    );
  }
  // the exporter renders; this process listens, so the port may be 0 and the address is the one asked for
  const exporter = new prometheus.PrometheusExporter({ preventServerStart: true });
  const meterProvider = new sdk.MeterProvider({
    readers: [exporter],
    resource: resources.resourceFromAttributes({ 'service.name': serviceName }),
  });
  const http = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('Not found: the metrics are at GET /metrics\n');
      return;
    }
    exporter.getMetricsRequestHandler(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', (error: NodeJS.ErrnoException) =>
      reject(
        error.code === 'EADDRINUSE'
          ? new CliError(`metrics port ${port} is in use: pass --metrics-port with a free port (or 0)`)
          : error,
      ),
    );
    http.listen(port, host, () => resolve());
  });
  const address = http.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}/metrics`,
    meterProvider,
    close: async () => {
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      });
      await meterProvider.shutdown();
    },
  };
}
