/**
 * The form an elicitation's `requestedSchema` describes (MCP elicitation: a flat object of string, number, integer,
 * boolean, single- and multi-select enum fields, with required fields and defaults), and its checks: an answer is
 * checked here before the page sends it, field by field; the console checks it again against the schema. Nothing here
 * touches the page, so the checks are tested on their own (test/console/formSchema.test.ts).
 */
export type FieldKind = 'string' | 'number' | 'integer' | 'boolean' | 'enum' | 'multi';

export interface FormField {
  name: string;
  label: string;
  description: string | undefined;
  kind: FieldKind;
  required: boolean;
  /** For enum and multi fields: the values and how they read. */
  options: Array<{ value: string; label: string }>;
  minimum: number | undefined;
  maximum: number | undefined;
  minLength: number | undefined;
  maxLength: number | undefined;
  format: string | undefined;
  /** The schema's default, as the form holds it. */
  initial: string | boolean | string[];
}

/** What a field holds while it is edited: text for text and numbers, a flag, or the chosen values. */
export type FieldValue = string | boolean | string[];

interface PropertySchema {
  type?: unknown;
  title?: unknown;
  description?: unknown;
  enum?: unknown;
  enumNames?: unknown;
  oneOf?: unknown;
  anyOf?: unknown;
  items?: unknown;
  default?: unknown;
  minimum?: unknown;
  maximum?: unknown;
  minLength?: unknown;
  maxLength?: unknown;
  format?: unknown;
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const text = (v: unknown) => (typeof v === 'string' ? v : undefined);

/** `enum` (with `enumNames`), or `oneOf`/`anyOf` of `{ const, title }`: the values and their labels. */
function optionsOf(schema: PropertySchema): Array<{ value: string; label: string }> | undefined {
  if (Array.isArray(schema.enum)) {
    const names = Array.isArray(schema.enumNames) ? schema.enumNames : [];
    return schema.enum.map((value, i) => ({ value: String(value), label: text(names[i]) ?? String(value) }));
  }
  const choices = Array.isArray(schema.oneOf) ? schema.oneOf : Array.isArray(schema.anyOf) ? schema.anyOf : undefined;
  if (!choices) return undefined;
  return choices
    .filter((c): c is { const: unknown; title?: unknown } => typeof c === 'object' && c !== null && 'const' in c)
    .map((c) => ({ value: String(c.const), label: text(c.title) ?? String(c.const) }));
}

/** The fields of a form schema, in its order; a field of a type the form cannot ask for is read as text. */
export function formFields(schema: unknown): FormField[] {
  const { properties, required } = (schema ?? {}) as { properties?: unknown; required?: unknown };
  if (typeof properties !== 'object' || properties === null) return [];
  const needed = Array.isArray(required) ? required : [];
  return Object.entries(properties as Record<string, PropertySchema>).map(([name, property]) => {
    const p = (typeof property === 'object' && property !== null ? property : {}) as PropertySchema;
    const options = optionsOf(p);
    const items = (typeof p.items === 'object' && p.items !== null ? p.items : {}) as PropertySchema;
    const multi = p.type === 'array' ? optionsOf(items) : undefined;
    const kind: FieldKind = multi
      ? 'multi'
      : options
        ? 'enum'
        : p.type === 'boolean' || p.type === 'number' || p.type === 'integer'
          ? p.type
          : 'string';
    const initial: FieldValue =
      kind === 'boolean'
        ? p.default === true
        : kind === 'multi'
          ? Array.isArray(p.default)
            ? p.default.map(String)
            : []
          : p.default === undefined || p.default === null
            ? ''
            : String(p.default);
    return {
      name,
      label: text(p.title) ?? name,
      description: text(p.description),
      kind,
      required: needed.includes(name),
      options: multi ?? options ?? [],
      minimum: num(p.minimum),
      maximum: num(p.maximum),
      minLength: num(p.minLength),
      maxLength: num(p.maxLength),
      format: text(p.format),
      initial,
    };
  });
}

/**
 * The content to send, or a problem per field: required fields present, numbers that are numbers (integers where
 * asked), within their bounds, text within its length and format, choices among the options.
 */
export function checkAnswer(
  fields: FormField[],
  values: Record<string, FieldValue>,
): { content: Record<string, unknown>; problems: Record<string, string> } {
  const content: Record<string, unknown> = {};
  const problems: Record<string, string> = {};
  for (const field of fields) {
    const value = values[field.name] ?? field.initial;
    const problem = (message: string) => (problems[field.name] = message);
    if (field.kind === 'boolean') {
      content[field.name] = value === true;
      continue;
    }
    if (field.kind === 'multi') {
      const chosen = Array.isArray(value) ? value : [];
      if (field.required && chosen.length === 0) problem('choose at least one');
      else if (chosen.some((v) => !field.options.some((o) => o.value === v))) problem('choose among the options');
      else if (chosen.length > 0 || field.required) content[field.name] = chosen;
      continue;
    }
    const raw = typeof value === 'string' ? value : '';
    if (raw.trim() === '') {
      if (field.required) problem('required');
      continue;
    }
    if (field.kind === 'number' || field.kind === 'integer') {
      const n = Number(raw.trim());
      if (!Number.isFinite(n)) problem('must be a number');
      else if (field.kind === 'integer' && !Number.isInteger(n)) problem('must be a whole number');
      else if (field.minimum !== undefined && n < field.minimum) problem(`must be at least ${field.minimum}`);
      else if (field.maximum !== undefined && n > field.maximum) problem(`must be at most ${field.maximum}`);
      else content[field.name] = n;
      continue;
    }
    if (field.kind === 'enum') {
      if (!field.options.some((o) => o.value === raw)) problem('choose among the options');
      else content[field.name] = raw;
      continue;
    }
    const length = [...raw].length;
    if (field.minLength !== undefined && length < field.minLength) problem(`at least ${field.minLength} characters`);
    else if (field.maxLength !== undefined && length > field.maxLength)
      problem(`at most ${field.maxLength} characters`);
    else if (field.format === 'email' && !/^[^@\s]+@[^@\s]+$/.test(raw)) problem('must be an email address');
    else if (field.format === 'uri' && !/^[a-z][a-z0-9+.-]*:/i.test(raw)) problem('must be a URI');
    else if (field.format === 'date' && !/^\d{4}-\d{2}-\d{2}$/.test(raw)) problem('must be a date (YYYY-MM-DD)');
    else content[field.name] = raw;
  }
  return { content, problems };
}
