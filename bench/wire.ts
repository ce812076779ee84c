/**
 * The exact bytes of a 2026-07-28 JSON-RPC request over Streamable HTTP: the `_meta` envelope and the
 * MCP-Protocol-Version / Mcp-Method / Mcp-Name headers (as test/support/rpc.ts sends them), built once so a load
 * generator can replay them without paying for JSON on the client side.
 */
export const PROTOCOL_VERSION = '2026-07-28';
const TASKS_EXTENSION_ID = 'io.modelcontextprotocol/tasks';

export interface WireRequest {
  body: string;
  headers: Record<string, string>;
}

export function wireRequest(
  method: string,
  params: Record<string, unknown>,
  options: { declareTasks: boolean },
): WireRequest {
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method,
    params: {
      ...params,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
        'io.modelcontextprotocol/clientInfo': { name: 'closeout-bench', version: '0.0.0' },
        'io.modelcontextprotocol/clientCapabilities': options.declareTasks
          ? { extensions: { [TASKS_EXTENSION_ID]: {} } }
          : {},
      },
    },
  });
  const name =
    method === 'tools/call'
      ? String(params['name'])
      : method.startsWith('tasks/')
        ? String(params['taskId'])
        : undefined;
  return {
    body,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL_VERSION,
      'mcp-method': method,
      ...(name !== undefined && { 'mcp-name': name }),
    },
  };
}
