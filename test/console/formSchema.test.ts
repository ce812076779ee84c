// The console's answer form reads every field kind an elicitation's requestedSchema may hold (string, number,
// integer, boolean, enum with and without titles, multi-select), with its defaults and required fields, and refuses an
// answer before it is sent: a missing required field, a number that is not one, a fraction for an integer, a value out
// of bounds, a choice not offered.
import { describe, expect, it } from 'vitest';

import { checkAnswer, formFields } from '../../src/console/web/formSchema.js';

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', title: 'Name', minLength: 2, maxLength: 5 },
    email: { type: 'string', format: 'email' },
    count: { type: 'integer', minimum: 1, maximum: 10, default: 3 },
    ratio: { type: 'number' },
    approve: { type: 'boolean', default: true },
    env: { type: 'string', enum: ['staging', 'production'], enumNames: ['Staging', 'Production'] },
    size: {
      type: 'string',
      oneOf: [
        { const: 's', title: 'Small' },
        { const: 'l', title: 'Large' },
      ],
      default: 'l',
    },
    tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] } },
  },
  required: ['name', 'count', 'env'],
};

describe('the answer form of a requestedSchema', () => {
  const fields = formFields(SCHEMA);

  it('reads every field kind, its labels, options, defaults and whether it is required', () => {
    expect(fields.map((f) => [f.name, f.kind, f.required, f.initial])).toEqual([
      ['name', 'string', true, ''],
      ['email', 'string', false, ''],
      ['count', 'integer', true, '3'],
      ['ratio', 'number', false, ''],
      ['approve', 'boolean', false, true],
      ['env', 'enum', true, ''],
      ['size', 'enum', false, 'l'],
      ['tags', 'multi', false, []],
    ]);
    expect(fields[0]!.label).toBe('Name');
    expect(fields[5]!.options).toEqual([
      { value: 'staging', label: 'Staging' },
      { value: 'production', label: 'Production' },
    ]);
    expect(fields[6]!.options.map((o) => o.label)).toEqual(['Small', 'Large']);
    expect(formFields(undefined)).toEqual([]);
  });

  it('turns a valid answer into typed content, leaving out empty optional fields', () => {
    const values = { name: 'Ada', count: '7', ratio: '0.5', approve: false, env: 'staging', tags: ['b'] };
    expect(checkAnswer(fields, values)).toEqual({
      content: { name: 'Ada', count: 7, ratio: 0.5, approve: false, env: 'staging', size: 'l', tags: ['b'] },
      problems: {},
    });
  });

  it('refuses what does not fit, naming each field', () => {
    const { problems } = checkAnswer(fields, {
      name: 'A',
      email: 'not an address',
      count: '2.5',
      ratio: 'many',
      env: 'test',
      size: '',
      tags: ['c'],
    });
    expect(problems).toEqual({
      name: 'at least 2 characters',
      email: 'must be an email address',
      count: 'must be a whole number',
      ratio: 'must be a number',
      env: 'choose among the options',
      tags: 'choose among the options',
    });
    expect(checkAnswer(fields, { name: '', count: '11', env: '' }).problems).toEqual({
      name: 'required',
      count: 'must be at most 10',
      env: 'required',
    });
  });
});
