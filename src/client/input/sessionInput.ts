/**
 * Input a 2025-era server asks for on the session: an `elicitation/create`, `sampling/createMessage` or `roots/list`
 * request it sends while a `tools/call` runs (2025-11-25 client features), answered by the same `inputHandlers` as a
 * task's `inputRequests`. Nothing here is durable, and nothing needs to be: the server holds the question in its own
 * process, inside the call, and no task exists to answer later. A form's accepted content gets the requested
 * schema's defaults for the fields it leaves out (SEP-1034), which the SDK client applies when the session declared
 * `elicitation.form.applyDefaults` (sessionCapabilities below). At 2026-07-28 a server sends no such requests (input
 * comes as `inputRequests` in results), and the SDK drops any that arrive.
 */
import type { Client, ClientCapabilities } from '@modelcontextprotocol/client';
import { SdkError, SdkErrorCode } from '@modelcontextprotocol/client';

import type { TaskRecord } from '../ledger/ledger.js';
import type { TaskInputContext, TaskInputHandlers } from './inputRouter.js';

/**
 * The capabilities a session declares at `initialize` (2025 revisions) for the handlers it has: a 2025-era server
 * only asks a client for what it declared.
 */
export function sessionCapabilities(handlers: TaskInputHandlers | undefined): ClientCapabilities {
  return {
    ...(handlers?.elicitation ? { elicitation: { form: { applyDefaults: true } } } : {}),
    ...(handlers?.sampling ? { sampling: {} } : {}),
    ...(handlers?.roots ? { roots: {} } : {}),
  };
}

/**
 * Answer the session's input requests through `handlers`. The request does not say which call it belongs to; when
 * exactly one call of this client is on the wire (`soleCall`), the context names its record and tool, else they are
 * empty. A handler is set only for a capability the SDK client declared (the connect functions declare them with
 * sessionCapabilities; a Client of the caller's declares its own), replacing one set on it before.
 */
export function answerSessionInput(
  client: Client,
  handlers: TaskInputHandlers,
  soleCall: () => TaskRecord | undefined,
): void {
  const context = (signal: AbortSignal): TaskInputContext => {
    const record = soleCall();
    return {
      taskId: undefined,
      recordId: record?.recordId ?? '',
      key: '',
      toolName: record?.toolName ?? '',
      correlationId: record?.correlationId,
      previouslyAsked: false,
      signal,
    };
  };
  const { elicitation, sampling, roots } = handlers;
  if (elicitation) {
    whenDeclared(() =>
      client.setRequestHandler('elicitation/create', (request, ctx) =>
        elicitation(request, context(ctx.mcpReq.signal)),
      ),
    );
  }
  if (sampling) {
    whenDeclared(() =>
      client.setRequestHandler('sampling/createMessage', (request, ctx) =>
        sampling(request, context(ctx.mcpReq.signal)),
      ),
    );
  }
  if (roots) {
    whenDeclared(() =>
      client.setRequestHandler('roots/list', (request, ctx) => roots(request, context(ctx.mcpReq.signal))),
    );
  }
}

/** Set a handler unless the client did not declare its capability (then no server asks for it). */
function whenDeclared(set: () => void): void {
  try {
    set();
  } catch (error) {
    if (!(error instanceof SdkError && error.code === SdkErrorCode.CapabilityNotSupported)) throw error;
  }
}
