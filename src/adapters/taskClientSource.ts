/**
 * The TaskClient an adapter's tools call through: one the caller passes (the caller's to close), or one the adapter
 * connects from connect options, `connectHttpTaskClient`'s with the server's `url`, which `closeTaskTools(tools)`
 * closes. Loads no framework.
 */
import type { ConnectHttpOptions } from '../client/index.js';
import { connectHttpTaskClient, TaskClient } from '../client/index.js';

/** What `connectHttpTaskClient(url, options)` takes, as one object: the adapter connects a TaskClient of its own. */
export interface TaskClientConnectOptions extends ConnectHttpOptions {
  url: string | URL;
}

/** Tools made from connect options, each set with the TaskClient connected for it. */
const CONNECTED = new WeakMap<object, TaskClient>();

/** `make`'s tools on `source`: the TaskClient given, or one connected from `source` (closed again when `make` throws). */
export async function toolsOn<Tools extends object>(
  source: TaskClient | TaskClientConnectOptions,
  make: (client: TaskClient) => Promise<Tools>,
): Promise<Tools> {
  if (source instanceof TaskClient) return make(source);
  const { url, ...options } = source;
  const client = await connectHttpTaskClient(url, options);
  try {
    const tools = await make(client);
    CONNECTED.set(tools, client);
    return tools;
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
}

/**
 * Closes the TaskClient an adapter connected from connect options for `tools` (what the adapter returned), once.
 * Tools made from a TaskClient the caller passed are left alone: that client is the caller's to close.
 */
export async function closeTaskTools(tools: object): Promise<void> {
  const client = CONNECTED.get(tools);
  CONNECTED.delete(tools);
  await client?.close();
}
