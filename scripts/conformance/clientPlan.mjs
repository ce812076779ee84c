/* global process -- Node globals: the lint config declares none for plain .mjs files */
/**
 * What a conformance client scenario asks a tools client to do: which tools to call, with which arguments. The mock
 * servers of @modelcontextprotocol/conformance fix their tool names; the scenario's context (MCP_CONFORMANCE_CONTEXT)
 * may list the calls itself. Shared by the two adapters (client-library.mjs, client-cli.mjs) so both make the same
 * calls, one through closeout/client, the other through the `closeout` command.
 */

/** Arguments for the suite's tools that need some; every other tool is called with `{}`. */
function argumentsFor(tool, tools) {
  switch (tool.name) {
    case 'add_numbers':
      return { a: 5, b: 3 };
    case 'valid_tool':
      return { region: 'us-west1' };
    case 'lookup_user':
      return { id: 'user-1' };
    case 'json_schema_echo': {
      // the harness checks that the schema the client observed is the one the server sent, untouched
      const observed = tools.find((t) => t.name === 'json_schema_2020_12_tool');
      return { schema: observed?.inputSchema ?? {} };
    }
    default:
      return {};
  }
}

/**
 * The calls to make, in order: the context's `toolCalls` when it lists them, else every listed tool (the schema
 * echo last, after the tool whose schema it echoes was seen).
 */
export function planCalls(scenario, tools, context) {
  if (Array.isArray(context?.toolCalls)) {
    return context.toolCalls.map((call) => ({ name: call.name, arguments: call.arguments ?? {} }));
  }
  const ordered = [...tools].sort(
    (a, b) => Number(a.name === 'json_schema_echo') - Number(b.name === 'json_schema_echo'),
  );
  // a tool that only describes a schema is listed, not called
  const called = ordered.filter((tool) => tool.name !== 'json_schema_2020_12_tool');
  return called.map((tool) => ({ name: tool.name, arguments: argumentsFor(tool, tools) }));
}

/** The scenario's context, when the suite gave one. */
export function scenarioContext() {
  const raw = process.env['MCP_CONFORMANCE_CONTEXT'];
  return raw ? JSON.parse(raw) : undefined;
}
