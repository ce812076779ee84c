/**
 * Which input requests a task may raise (docs/DESIGN.md rule 6): the kinds the creating request declared in its client
 * capabilities. Core MRTR: "Servers MUST NOT send an inputRequests that the client has not declared support for in
 * its capabilities"; client/elicitation: "Servers MUST NOT send elicitation requests with modes that are not supported
 * by the client", and a bare `elicitation: {}` declares form mode only.
 */
import type { InputRequest, JsonObject } from '../protocol/index.js';
import type { InputCapabilities } from './store/taskStore.js';
import type { InputKind } from './taskTool.js';

/** The input part of a request's declared client capabilities, normalised (`elicitation: {}` becomes form only). */
export function inputCapabilitiesOf(clientCapabilities: unknown): InputCapabilities {
  if (!isObject(clientCapabilities)) return {};
  const declared: InputCapabilities = {};
  const { elicitation, sampling, roots } = clientCapabilities;
  if (isObject(elicitation)) {
    const form = isObject(elicitation['form']) ? elicitation['form'] : undefined;
    const url = isObject(elicitation['url']) ? elicitation['url'] : undefined;
    // spec (client/elicitation): an empty elicitation capability is equivalent to { form: {} }
    declared.elicitation =
      form === undefined && url === undefined ? { form: {} } : { ...(form && { form }), ...(url && { url }) };
  }
  if (isObject(sampling)) declared.sampling = sampling;
  if (isObject(roots)) declared.roots = roots;
  return declared;
}

/** What `request` needs that `declared` lacks; undefined when it may be sent. Undefined `declared`: not recorded. */
export function undeclaredInput(
  request: InputRequest,
  declared: InputCapabilities | undefined,
): { kind: InputKind; mode: string | undefined; needs: string } | undefined {
  // a task created before the store kept the declaration: nothing is known, so nothing is refused
  if (declared === undefined) return undefined;
  switch (request.method) {
    case 'elicitation/create': {
      // spec (client/elicitation): mode is optional for form mode and defaults to "form"
      const mode = typeof request.params['mode'] === 'string' ? request.params['mode'] : 'form';
      if ((mode === 'form' || mode === 'url') && declared.elicitation?.[mode] !== undefined) return undefined;
      return { kind: 'elicitation', mode, needs: declared.elicitation ? `elicitation.${mode}` : 'elicitation' };
    }
    case 'sampling/createMessage':
      return declared.sampling ? undefined : { kind: 'sampling', mode: undefined, needs: 'sampling' };
    case 'roots/list':
      return declared.roots ? undefined : { kind: 'roots', mode: undefined, needs: 'roots' };
  }
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
