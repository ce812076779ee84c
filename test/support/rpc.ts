export type { RpcOptions, RpcResponse, WireRequest } from '../../src/cli/commands/wireProbe.js';
export { PROTOCOL_VERSION, routingHeaders, rpc, TASKS, wireRequest } from '../../src/cli/commands/wireProbe.js';
