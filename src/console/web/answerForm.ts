/** The answer form of one input request, its fields from its `requestedSchema` (formSchema.ts), checked before sending. */
import htm from 'htm';
import { h } from 'preact';
import { useState } from 'preact/hooks';

import type { FieldValue, FormField } from './formSchema.js';
import { checkAnswer, formFields } from './formSchema.js';

const html = htm.bind(h);

export interface AnswerFormProps {
  /** Tells the fields of one form apart from another's on the page. */
  formId: string;
  schema: unknown;
  /** Sends the answer; resolves when the console took it. */
  send: (response: { action: 'accept' | 'decline' | 'cancel'; content?: Record<string, unknown> }) => Promise<void>;
}

/** The form of one input request: its fields, then accept, decline or dismiss. */
export function AnswerForm({ formId, schema, send }: AnswerFormProps) {
  const fields = formFields(schema);
  const [values, setValues] = useState<Record<string, FieldValue>>(() =>
    Object.fromEntries(fields.map((f) => [f.name, f.initial])),
  );
  const [problems, setProblems] = useState<Record<string, string>>({});
  const [busy, setBusy] = useState(false);
  const set = (name: string, value: FieldValue) => setValues((old) => ({ ...old, [name]: value }));
  const act = async (action: 'accept' | 'decline' | 'cancel') => {
    if (action === 'accept') {
      const checked = checkAnswer(fields, values);
      setProblems(checked.problems);
      if (Object.keys(checked.problems).length > 0) {
        const first = fields.find((f) => checked.problems[f.name]);
        document.getElementById(`${formId}-${first?.name}`)?.focus();
        return;
      }
      setBusy(true);
      await send({ action, content: checked.content }).finally(() => setBusy(false));
      return;
    }
    setBusy(true);
    await send({ action }).finally(() => setBusy(false));
  };
  const fieldView = (field: FormField) => {
    const id = `${formId}-${field.name}`;
    const problem = problems[field.name];
    const described = [field.description && `${id}-hint`, problem && `${id}-problem`].filter(Boolean).join(' ');
    const common = {
      id,
      name: field.name,
      'aria-invalid': problem ? 'true' : undefined,
      'aria-describedby': described || undefined,
      'aria-required': field.required ? 'true' : undefined,
    };
    const label = html`<label for=${id}
      >${field.label}${field.required ? html` <span class="required" aria-hidden="true">*</span>` : null}</label
    >`;
    const hint = field.description ? html`<span class="hint" id=${`${id}-hint`}>${field.description}</span>` : null;
    const shown = problem ? html`<span class="problem" id=${`${id}-problem`} role="alert">${problem}</span>` : null;
    const value = values[field.name];
    if (field.kind === 'boolean') {
      return html`<div class="field check">
        <input
          type="checkbox"
          ...${common}
          checked=${value === true}
          onChange=${(e: Event) => set(field.name, (e.target as HTMLInputElement).checked)}
        />
        ${label} ${hint} ${shown}
      </div>`;
    }
    if (field.kind === 'enum') {
      return html`<div class="field">
        ${label}
        <select
          ...${common}
          value=${value}
          onChange=${(e: Event) => set(field.name, (e.target as HTMLSelectElement).value)}
        >
          ${field.required && value !== '' ? null : html`<option value="">—</option>`}
          ${field.options.map((o) => html`<option value=${o.value}>${o.label}</option>`)}
        </select>
        ${hint} ${shown}
      </div>`;
    }
    if (field.kind === 'multi') {
      const chosen = Array.isArray(value) ? value : [];
      return html`<fieldset class="field" id=${id} tabindex="-1" aria-describedby=${described || undefined}>
        <legend>
          ${field.label}${field.required ? html` <span class="required" aria-hidden="true">*</span>` : null}
        </legend>
        ${field.options.map(
          (o) =>
            html`<label class="check"
              ><input
                type="checkbox"
                checked=${chosen.includes(o.value)}
                onChange=${(e: Event) =>
                  set(
                    field.name,
                    (e.target as HTMLInputElement).checked ? [...chosen, o.value] : chosen.filter((v) => v !== o.value),
                  )}
              />
              ${o.label}</label
            >`,
        )}
        ${hint} ${shown}
      </fieldset>`;
    }
    const type =
      field.kind === 'number' || field.kind === 'integer'
        ? 'number'
        : field.format === 'email'
          ? 'email'
          : field.format === 'date'
            ? 'date'
            : field.format === 'uri'
              ? 'url'
              : 'text';
    return html`<div class="field">
      ${label}
      <input
        type=${type}
        ...${common}
        step=${field.kind === 'integer' ? '1' : field.kind === 'number' ? 'any' : undefined}
        min=${field.minimum}
        max=${field.maximum}
        value=${value}
        onInput=${(e: Event) => set(field.name, (e.target as HTMLInputElement).value)}
      />
      ${hint} ${shown}
    </div>`;
  };
  return html`<form
    class="answer"
    novalidate
    onSubmit=${(e: Event) => {
      e.preventDefault();
      void act('accept');
    }}
  >
    ${fields.length === 0 ? html`<p class="hint">The form asks for no fields: accept, decline or dismiss.</p>` : null}
    ${fields.map(fieldView)}
    <div class="actions">
      <button type="submit" class="primary" disabled=${busy}>Send answer</button>
      <button type="button" disabled=${busy} onClick=${() => void act('decline')}>Decline</button>
      <button type="button" disabled=${busy} onClick=${() => void act('cancel')}>Dismiss</button>
    </div>
  </form>`;
}
