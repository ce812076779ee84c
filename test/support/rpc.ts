export type { RpcOptions, RpcResponse, WireRequest } from '../../src/cli/wireProbe.js';
export { PROTOCOL_VERSION, routingHeaders, rpc, TASKS, wireRequest } from '../../src/cli/wireProbe.js';
