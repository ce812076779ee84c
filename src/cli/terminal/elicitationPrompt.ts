/**
 * Answering a task's elicitation (docs/REQUIREMENTS.md S9): at a terminal, the form is asked field by field with its
 * schema's types, defaults and enums, and the person chooses accept, decline or cancel; without a terminal, the answer
 * comes from `--accept JSON` / `--decline` / `--dismiss`, or the task is left for `closeout answer`. What the server
 * wrote is shown as its words, attributed to it; a URL is shown, never opened; nothing is ever executed.
 */
import type * as Inquirer from '@inquirer/prompts';
import type { ElicitRequest, ElicitResult } from '@modelcontextprotocol/client';

import type { TaskInputContext, TaskInputHandlers } from '../../client/index.js';
import { CliError } from '../cliError.js';
import type { Output } from './output.js';
import { quoteServer, serverLine } from './serverText.js';

export type PresetAnswer =
  { action: 'accept'; content: Record<string, unknown> } | { action: 'decline' } | { action: 'cancel' };

export interface AnswerFlags {
  accept?: Record<string, unknown> | undefined;
  decline?: boolean | undefined;
  dismiss?: boolean | undefined;
}

export function presetFrom(flags: AnswerFlags): PresetAnswer | undefined {
  const given = [flags.accept !== undefined, flags.decline === true, flags.dismiss === true].filter(Boolean).length;
  if (given > 1) throw new CliError('pass only one of --accept, --decline and --dismiss');
  if (flags.accept !== undefined) return { action: 'accept', content: flags.accept };
  if (flags.decline) return { action: 'decline' };
  if (flags.dismiss) return { action: 'cancel' };
  return undefined;
}

/** One prompt at a time on the terminal: `exclusive(ask)` runs `ask` after every earlier one settled. */
export function promptQueue(): <T>(ask: () => Promise<T>) => Promise<T> {
  let last: Promise<unknown> = Promise.resolve();
  return <T>(ask: () => Promise<T>): Promise<T> => {
    const turn = last.then(ask, ask);
    last = turn.catch(() => undefined);
    return turn;
  };
}

/** Says which answer went to the server (an event with --json). */
export function showAnswered(
  out: Output,
  context: TaskInputContext,
  result: ElicitResult,
  how: 'prompt' | 'flags',
): void {
  out.event({ event: 'answered', taskId: context.taskId, key: context.key, action: result.action, how });
  const content = result.content ? ` ${serverLine(JSON.stringify(result.content))}` : '';
  const source = how === 'flags' ? out.c.dim(' (without a prompt)') : '';
  out.line(`  ${out.c.green('answered')} ${result.action}${content}${source}`);
}

/** Can this process ask a person? Prompts need a terminal on stdin and on the stream they draw on. */
export function canPrompt(out: Output): boolean {
  return process.stdin.isTTY === true && promptStream(out).isTTY === true;
}

/** Prompts draw on stdout in human mode, on stderr with --json (stdout carries JSON only). */
function promptStream(out: Output): NodeJS.WriteStream {
  return out.json || out.stdout.isTTY !== true ? out.stderr : out.stdout;
}

/** What the elicitation handler needs from the command that follows the task. */
export interface InputHost {
  out: Output;
  preset: PresetAnswer | undefined;
  interactive: boolean;
  /** Run `ask` while no other prompt is on the terminal. */
  exclusive<T>(ask: () => Promise<T>): Promise<T>;
  /** Ctrl-C in a prompt: detach everything, as Ctrl-C does elsewhere. */
  interrupt(): void;
  /** This process cannot answer: it stops following the task, which goes on. */
  needsInput(recordId: string, why: string): void;
  /** An answer was decided (for JSON events and the demo). */
  answered?(context: TaskInputContext, result: ElicitResult, how: 'prompt' | 'flags'): void;
}

interface FieldSchema {
  type?: string;
  title?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  enumNames?: unknown[];
  oneOf?: { const?: unknown; title?: unknown }[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  format?: string;
  items?: { type?: string; enum?: unknown[]; anyOf?: { const?: unknown; title?: unknown }[] };
  minItems?: number;
  maxItems?: number;
}

interface FormParams {
  mode?: 'form' | 'url';
  message?: string;
  requestedSchema?: { properties?: Record<string, FieldSchema>; required?: string[] };
  url?: string;
}

/** The elicitation handler for tasks of `endpoint`. */
export function elicitationHandler(host: InputHost, endpoint: string): NonNullable<TaskInputHandlers['elicitation']> {
  return async (request: ElicitRequest, context: TaskInputContext): Promise<ElicitResult> => {
    const params = request.params as FormParams;
    if (host.preset) {
      showRequest(host.out, endpoint, params, context);
      const answer = await fromPreset(host.preset, params);
      if (typeof answer === 'string') return leave(host, context, answer);
      host.answered?.(context, answer, 'flags');
      return answer;
    }
    if (!host.interactive) {
      showRequest(host.out, endpoint, params, context);
      return leave(host, context, 'stdin is not a terminal and no --accept, --decline or --dismiss was given');
    }
    return host.exclusive(async () => {
      showRequest(host.out, endpoint, params, context);
      // the prompt owns the terminal while the person reads and answers: no live lines, nothing printed into it
      host.out.beginPrompt();
      let answer: ElicitResult;
      try {
        answer = await promptAnswer(host.out, params, context.signal);
      } catch (error) {
        if ((error as Error).name !== 'ExitPromptError') throw error;
        host.interrupt();
        return waitForAbort(context.signal);
      } finally {
        host.out.endPrompt();
      }
      host.answered?.(context, answer, 'prompt');
      return answer;
    });
  };
}

/** The form's defaults, from its schema. */
export function formDefaults(params: FormParams): Record<string, unknown> {
  const defaults: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(params.requestedSchema?.properties ?? {})) {
    if (field.default !== undefined) defaults[name] = field.default;
  }
  return defaults;
}

/**
 * A preset answer for this request, or why it cannot be used: `--accept` is checked against the form's schema (the
 * SDK's own JSON Schema validator), so a boolean given "yes", a field the form does not have or a value out of its
 * range is refused here, naming the field, and never reaches the server.
 */
export async function fromPreset(preset: PresetAnswer, params: FormParams): Promise<ElicitResult | string> {
  if (preset.action !== 'accept') return { action: preset.action };
  if (params.mode === 'url') return { action: 'accept' };
  const content = { ...formDefaults(params), ...preset.content };
  const missing = (params.requestedSchema?.required ?? []).filter((name) => content[name] === undefined);
  if (missing.length > 0) return `--accept lacks the required field(s) ${missing.map((m) => serverLine(m)).join(', ')}`;
  const properties = params.requestedSchema?.properties ?? {};
  const unknown = Object.keys(content).filter((name) => !Object.hasOwn(properties, name));
  if (unknown.length > 0) {
    const fields = Object.keys(properties).map((name) => serverLine(name));
    return `--accept has field(s) the form does not ask for: ${unknown.map((u) => serverLine(u)).join(', ')} (it asks for ${fields.join(', ') || 'nothing'})`;
  }
  // loaded only when an answer is checked: ajv is not part of every command's start
  const { AjvJsonSchemaValidator } = await import('@modelcontextprotocol/client/validators/ajv');
  const check = new AjvJsonSchemaValidator().getValidator({ ...params.requestedSchema, type: 'object' } as never)(
    content,
  );
  if (!check.valid) {
    return `--accept does not fit the form: ${serverLine((check.errorMessage ?? 'invalid').replace(/\bdata\//g, ''))}`;
  }
  return { action: 'accept', content: content as ElicitResult['content'] & object };
}

function showRequest(out: Output, endpoint: string, params: FormParams, context: TaskInputContext): void {
  const mode = params.mode === 'url' ? 'url' : 'form';
  out.event({
    event: 'input',
    taskId: context.taskId,
    key: context.key,
    method: 'elicitation/create',
    mode,
    from: endpoint,
    message: params.message ?? null,
    ...(mode === 'url' ? { url: params.url ?? null } : { requestedSchema: params.requestedSchema ?? null }),
  });
  const c = out.c;
  out.line(
    `${c.yellow('?')} ${c.bold('input requested')} by ${endpoint} for ${context.taskId === undefined ? 'the call' : `task ${context.taskId}`} (${context.toolName || 'tool unknown'})${context.key === '' ? '' : `, key ${JSON.stringify(serverLine(context.key))}`}${context.previouslyAsked ? c.dim(' (asked before, unanswered)') : ''}`,
  );
  out.line(c.dim('  the server says:'));
  out.line(quoteServer(params.message ?? '(no message)'));
  if (mode === 'url') {
    out.line(`  it asks you to open ${c.underline(serverLine(params.url ?? '(no url)'))}`);
    out.line(c.dim('  closeout does not open links: open it yourself only if you trust this server'));
  }
}

async function leave(host: InputHost, context: TaskInputContext, why: string): Promise<ElicitResult> {
  // an MRTR round of tools/call (no task yet) cannot be left waiting: the call ends saying why
  if (context.taskId === undefined) throw new Error(why);
  host.needsInput(context.recordId, why);
  return waitForAbort(context.signal);
}

/** Never answers: the task is being let go, and its abort tells the input router to record nothing. */
function waitForAbort(signal: AbortSignal): Promise<never> {
  return new Promise((_resolve, reject) => {
    if (signal.aborted) reject(signal.reason as Error);
    else signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
  });
}

async function promptAnswer(out: Output, params: FormParams, signal: AbortSignal): Promise<ElicitResult> {
  const prompts = await import('@inquirer/prompts');
  const ctx = { input: process.stdin, output: promptStream(out), signal, clearPromptOnDone: false };
  const urlMode = params.mode === 'url';
  const action = await prompts.select(
    {
      message: 'Your answer',
      choices: [
        { name: urlMode ? 'Accept: I completed it at that URL' : 'Accept: fill in the form', value: 'accept' as const },
        { name: 'Decline', value: 'decline' as const },
        { name: 'Cancel: dismiss without choosing', value: 'cancel' as const },
      ],
    },
    ctx,
  );
  if (action !== 'accept' || urlMode) return { action };
  const content: Record<string, unknown> = {};
  const required = new Set(params.requestedSchema?.required ?? []);
  for (const [name, field] of Object.entries(params.requestedSchema?.properties ?? {})) {
    const value = await askField(prompts, ctx, name, field, required.has(name), out);
    if (value !== undefined) content[name] = value;
  }
  return { action: 'accept', content: content as ElicitResult['content'] & object };
}

type Prompts = typeof Inquirer;
type PromptContext = { input: NodeJS.ReadableStream; output: NodeJS.WritableStream; signal: AbortSignal };

async function askField(
  prompts: Prompts,
  ctx: PromptContext,
  name: string,
  field: FieldSchema,
  required: boolean,
  out: Output,
): Promise<unknown> {
  const c = out.c;
  const label = `${serverLine(field.title ?? name)}${field.description ? c.dim(` (${serverLine(field.description)})`) : ''}${required ? '' : c.dim(' [optional]')}`;
  const choices = choicesOf(field.enum, field.enumNames, field.oneOf);
  if (field.type === 'boolean') {
    return prompts.confirm(
      { message: label, default: typeof field.default === 'boolean' ? field.default : false },
      ctx,
    );
  }
  if (choices) {
    const skip = required ? [] : [{ name: c.dim('(leave empty)'), value: undefined }];
    return prompts.select<unknown>(
      {
        message: label,
        choices: [...choices, ...skip],
        ...(field.default !== undefined && { default: field.default }),
      },
      ctx,
    );
  }
  if (field.type === 'array') {
    const items = choicesOf(field.items?.enum, undefined, field.items?.anyOf) ?? [];
    const defaults = Array.isArray(field.default) ? field.default : [];
    const picked = await prompts.checkbox<unknown>(
      {
        message: label,
        choices: items.map((item) => ({ ...item, checked: defaults.includes(item.value) })),
        validate: (chosen) => {
          if (field.minItems !== undefined && chosen.length < field.minItems) return `pick at least ${field.minItems}`;
          if (field.maxItems !== undefined && chosen.length > field.maxItems) return `pick at most ${field.maxItems}`;
          return true;
        },
      },
      ctx,
    );
    return picked.length === 0 && !required ? undefined : picked;
  }
  if (field.type === 'number' || field.type === 'integer') {
    return prompts.number(
      {
        message: label,
        required,
        step: field.type === 'integer' ? 1 : 'any',
        ...(typeof field.default === 'number' && { default: field.default }),
        ...(field.minimum !== undefined && { min: field.minimum }),
        ...(field.maximum !== undefined && { max: field.maximum }),
      },
      ctx,
    );
  }
  const text = await prompts.input(
    {
      message: label,
      required,
      ...(typeof field.default === 'string' && { default: field.default }),
      validate: (value) => validateString(value, field, required),
    },
    ctx,
  );
  return text === '' && !required ? undefined : text;
}

function choicesOf(
  values: unknown[] | undefined,
  names: unknown[] | undefined,
  oneOf: { const?: unknown; title?: unknown }[] | undefined,
): { name: string; value: unknown }[] | undefined {
  if (Array.isArray(oneOf) && oneOf.length > 0) {
    return oneOf.map((option) => ({ name: serverLine(String(option.title ?? option.const)), value: option.const }));
  }
  if (Array.isArray(values) && values.length > 0) {
    return values.map((value, i) => ({ name: serverLine(String(names?.[i] ?? value)), value }));
  }
  return undefined;
}

function validateString(value: string, field: FieldSchema, required: boolean): true | string {
  if (value === '' && !required) return true;
  if (field.minLength !== undefined && value.length < field.minLength) return `at least ${field.minLength} characters`;
  if (field.maxLength !== undefined && value.length > field.maxLength) return `at most ${field.maxLength} characters`;
  switch (field.format) {
    case 'email':
      return /^[^@\s]+@[^@\s]+$/.test(value) || 'an email address, e.g. ada@example.com';
    case 'uri':
      return URL.canParse(value) || 'a URI, e.g. https://example.com';
    case 'date':
      return /^\d{4}-\d{2}-\d{2}$/.test(value) || 'a date, YYYY-MM-DD';
    case 'date-time':
      return !Number.isNaN(Date.parse(value)) || 'a date and time, e.g. 2026-07-28T12:00:00Z';
  }
  return true;
}
