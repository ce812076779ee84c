/**
 * `closeout tools URL`: the tools a server offers (name, title, the task support it declares, the input schema), read
 * with one `tools/list` (every page) and nothing recorded anywhere; `call URL` without a tool prints the same.
 */
import type { Tool } from '@modelcontextprotocol/client';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { Command } from 'commander';

import { DEFAULT_CLIENT_INFO } from '../../client/connect.js';
import { listAllTools } from '../../client/transport/listTools.js';
import { parseUrl } from '../arguments.js';
import type { JsonFlags, TokenFlags } from '../commonOptions.js';
import { addJsonOption, addTokenOption } from '../commonOptions.js';
import { explainConnectError } from '../terminal/explain.js';
import { Output } from '../terminal/output.js';
import { serverLine } from '../terminal/serverText.js';

type ToolsFlags = JsonFlags & TokenFlags;

export function registerTools(program: Command): void {
  const command = program
    .command('tools')
    .description('List the tools a server offers: name, title, task support, input (nothing is called or recorded)')
    .argument('<url>', 'the server’s MCP endpoint, e.g. http://127.0.0.1:3000/mcp', parseUrl);
  addTokenOption(command);
  addJsonOption(command, 'print the tools/list entries as one JSON document');
  command.action((url: string, flags: ToolsFlags) => printTools(url, flags));
}

/** Lists the tools of `url` to stdout (`closeout tools`, and `closeout call URL` without a tool). */
export async function printTools(url: string, flags: ToolsFlags): Promise<void> {
  const out = new Output({ json: flags.json });
  const tools = await listTools(url, flags.token ?? process.env['CLOSEOUT_TOKEN']);
  if (out.json) {
    process.stdout.write(`${JSON.stringify({ endpoint: url, tools })}\n`);
    return;
  }
  if (tools.length === 0) {
    out.line(`${url} offers no tools`);
    return;
  }
  const rows = tools.map((tool) => [
    serverLine(tool.name),
    serverLine(tool.title ?? tool.annotations?.title ?? ''),
    taskSupportOf(tool),
    inputSummary(tool.inputSchema),
  ]);
  const header = ['TOOL', 'TITLE', 'TASKS', 'INPUT'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  out.line(out.c.dim(line(header)));
  for (const row of rows) out.line(line(row));
  out.line(
    out.c.dim(
      `${tools.length} tool${tools.length === 1 ? '' : 's'} at ${url}; call one with \`closeout call ${url} TOOL --args JSON\`, --json for the full schemas`,
    ),
  );
}

async function listTools(url: string, token: string | undefined): Promise<Tool[]> {
  const client = new Client(DEFAULT_CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    ...(token ? { requestInit: { headers: { authorization: `Bearer ${token}` } } } : {}),
  });
  try {
    await client.connect(transport);
  } catch (error) {
    await client.close().catch(() => undefined);
    throw explainConnectError(url, error);
  }
  try {
    return await listAllTools(client);
  } catch (error) {
    throw explainConnectError(url, error);
  } finally {
    await client.close().catch(() => undefined);
  }
}

/**
 * What the tool declares about tasks: `execution.taskSupport` where a server says it (2025-11-25 servers did); at
 * 2026-07-28 a server decides per call, shown as `per call`.
 */
function taskSupportOf(tool: Tool): string {
  const declared = (tool as { execution?: { taskSupport?: unknown } }).execution?.taskSupport;
  return typeof declared === 'string' ? serverLine(declared) : 'per call';
}

/** The input schema's properties in one line: `name: type`, required ones marked `*`. */
function inputSummary(schema: Tool['inputSchema']): string {
  const properties = (schema.properties ?? {}) as Record<string, { type?: unknown; enum?: unknown }>;
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  const parts = Object.entries(properties).map(([name, property]) => {
    const type = Array.isArray(property.enum)
      ? property.enum.map((value) => JSON.stringify(value)).join('|')
      : typeof property.type === 'string'
        ? property.type
        : 'any';
    return `${serverLine(name)}${required.has(name) ? '*' : ''}: ${serverLine(type)}`;
  });
  const summary = parts.length === 0 ? '(no arguments)' : parts.join(', ');
  return summary.length > 80 ? `${summary.slice(0, 79)}…` : summary;
}
