export type { RpcOptions, RpcResponse } from '../../src/cli/wireProbe.js';
export { PROTOCOL_VERSION, rpc, TASKS } from '../../src/cli/wireProbe.js';
