/**
 * A guard in front of the SDK's HTTP handler: a request whose JSON nests deeper than MAX_REQUEST_JSON_DEPTH is
 * answered 400 with a JSON-RPC error before the SDK parses it. The SDK (2.4) validates the request envelope with
 * recursive zod schemas that overflow the stack at a few thousand levels and then answer HTTP 500
 * (test/server/hostile.test.ts found it); the guard makes that a precise refusal (docs/operations.md, "Limits").
 */
import type { McpHttpHandler } from '@modelcontextprotocol/server';

/** Deepest nesting of arrays and objects a request body may have; above maxJsonDepth's default, below the SDK's. */
export const MAX_REQUEST_JSON_DEPTH = 512;

/** The SDK's own default body limit, kept for a body the guard reads itself. */
const MAX_REQUEST_BODY_BYTES = 4 * 1024 * 1024;

export function guardJsonDepth(handler: McpHttpHandler): McpHttpHandler {
  return {
    ...handler,
    fetch: async (request, options) => {
      if (request.method.toUpperCase() !== 'POST') return handler.fetch(request, options);
      if (options?.parsedBody !== undefined) {
        return nestsDeeperThan(options.parsedBody, MAX_REQUEST_JSON_DEPTH)
          ? tooDeep(options.parsedBody)
          : handler.fetch(request, options);
      }
      // a declared length over the limit: the SDK refuses it (413) without reading the body
      if (Number(request.headers.get('content-length')) > MAX_REQUEST_BODY_BYTES)
        return handler.fetch(request, options);
      const text = await readAtMost(request, MAX_REQUEST_BODY_BYTES);
      if (text === undefined) return tooLarge();
      if (textNestsDeeperThan(text, MAX_REQUEST_JSON_DEPTH)) return tooDeep(parseOrUndefined(text));
      // the body goes on parsed, the SDK's escape hatch for a body already read: it then neither clones nor re-reads
      // the request, and no second Request is built (bench/RESULTS.md: a third of a tasks/get's CPU on the server)
      const parsedBody = parseOrUndefined(text);
      if (parsedBody !== undefined) return handler.fetch(request, { ...options, parsedBody });
      // not JSON (or empty): passed on as it came, for the SDK's own answer
      const { method, headers, signal } = request;
      return handler.fetch(new Request(request.url, { method, headers, signal, body: text }), options);
    },
  };
}

/** Whether JSON text nests deeper than `max`, in one pass without parsing (strings and escapes skipped). */
export function textNestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return false;
}

function nestsDeeperThan(value: unknown, max: number): boolean {
  const pending: [unknown, number][] = [[value, 1]];
  while (pending.length > 0) {
    const [node, depth] = pending.pop()!;
    if (typeof node !== 'object' || node === null) continue;
    if (depth > max) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) pending.push([child, depth + 1]);
  }
  return false;
}

async function readAtMost(request: Request, maxBytes: number): Promise<string | undefined> {
  if (request.body === null) return '';
  const decoder = new TextDecoder();
  let text = '';
  let received = 0;
  for await (const chunk of request.body as unknown as AsyncIterable<Uint8Array>) {
    received += chunk.byteLength;
    if (received > maxBytes) return undefined;
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}

/** The body, to echo its id in the refusal when it can be read (JSON.parse does not recurse). */
function parseOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function tooDeep(body: unknown): Response {
  const id = (body as { id?: unknown } | undefined)?.id;
  return Response.json(
    {
      jsonrpc: '2.0',
      id: typeof id === 'string' || typeof id === 'number' ? id : null,
      error: {
        code: -32600,
        message: `Invalid Request: the JSON nests deeper than this server's limit of ${MAX_REQUEST_JSON_DEPTH} levels`,
      },
    },
    { status: 400 },
  );
}

function tooLarge(): Response {
  return Response.json(
    {
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32000,
        message: `Payload Too Large: Request body must not exceed ${MAX_REQUEST_BODY_BYTES} bytes`,
      },
    },
    { status: 413, headers: { connection: 'close' } },
  );
}
