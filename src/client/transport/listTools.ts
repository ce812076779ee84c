/** Every tool a server lists, every page of `tools/list` read, at most MAX_LISTED_TOOLS (a server that pages for ever). */
import type { Client, Tool } from '@modelcontextprotocol/client';

export const MAX_LISTED_TOOLS = 10_000;

export async function listAllTools(client: Client): Promise<Tool[]> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? undefined : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined && tools.length < MAX_LISTED_TOOLS);
  return tools;
}
