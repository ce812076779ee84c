/**
 * Typed input for handlers (docs/server.md, "What the runtime guarantees"): `ctx.elicit(key, { message, schema })` asks with a form whose
 * requested schema is made from a zod object, and gives the accepted content back parsed and typed, decline and
 * cancel apart; `ctx.confirm(key, message)` is a yes/no question. Both go through `ctx.input`, so a key answered
 * before (in an earlier attempt) is answered at once, and the request is kept with the task across restarts.
 */
import * as z from 'zod/v4';

import type { InputRequest, InputResponse } from '../protocol/index.js';

/** What the person did with a form: accepted it with `content`, declined it, or dismissed it (`cancel`). */
export type Elicited<T> = { action: 'accept'; content: T } | { action: 'decline' } | { action: 'cancel' };

/** A form: the message shown, and the fields as a zod object of strings, numbers, booleans and enums. */
export interface ElicitForm<Schema extends z.ZodObject> {
  message: string;
  schema: Schema;
}

/** Field types a form may hold (spec: client/elicitation, "Requested schema": flat, primitive fields). */
const FIELD_TYPES = new Set(['string', 'number', 'integer', 'boolean']);

/** The elicitation request for `form`: its JSON Schema, checked to be one an elicitation form can carry. */
export function formRequest(form: ElicitForm<z.ZodObject>): InputRequest {
  const json = z.toJSONSchema(form.schema, { io: 'input' }) as {
    properties?: Record<string, { type?: unknown; enum?: unknown }>;
    required?: string[];
  };
  const properties = json.properties ?? {};
  for (const [name, field] of Object.entries(properties)) {
    if (!FIELD_TYPES.has(String(field.type)) && !Array.isArray(field.enum)) {
      throw new TypeError(
        `form field ${name} is ${JSON.stringify(field.type ?? field)}: an elicitation form holds only strings, numbers, integers, booleans and enums`,
      );
    }
  }
  return {
    method: 'elicitation/create',
    params: {
      mode: 'form',
      message: form.message,
      requestedSchema: { type: 'object', properties, ...(json.required && { required: json.required }) },
    },
  } as InputRequest;
}

/** The client's response to a form, parsed by its schema: an accepted content that does not fit it throws. */
export function parseElicited<Schema extends z.ZodObject>(
  key: string,
  form: ElicitForm<Schema>,
  response: InputResponse,
): Elicited<z.infer<Schema>> {
  const action = (response as { action?: unknown }).action;
  if (action === 'decline' || action === 'cancel') return { action };
  if (action !== 'accept') {
    throw new Error(`the answer to input ${key} is not an elicitation result (action ${JSON.stringify(action)})`);
  }
  const parsed = form.schema.safeParse((response as { content?: unknown }).content ?? {});
  if (!parsed.success) {
    throw new Error(`the answer to input ${key} does not fit its form: ${z.prettifyError(parsed.error)}`);
  }
  return { action: 'accept', content: parsed.data };
}

const CONFIRM = z.object({ confirm: z.boolean() });

/** The typed helpers over a run's `input`. */
export function typedInput(input: (key: string, request: InputRequest) => Promise<InputResponse>) {
  const elicit = async <Schema extends z.ZodObject>(
    key: string,
    form: ElicitForm<Schema>,
  ): Promise<Elicited<z.infer<Schema>>> => parseElicited(key, form, await input(key, formRequest(form)));
  const confirm = async (key: string, message: string): Promise<boolean> => {
    const answer = await elicit(key, { message, schema: CONFIRM });
    return answer.action === 'accept' && answer.content.confirm;
  };
  return { elicit, confirm };
}
