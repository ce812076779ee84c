// Invariant: a server answer that breaks SEP-2663 is named precisely (which field, which transition) and never
// accepted; a terminal task may repeat itself but never change.
import { describe, expect, it } from 'vitest';

import {
  parseCreateTaskResult,
  parseGetTaskResult,
  progressionViolation,
} from '../../src/client/transport/serverOutput.js';

const base = {
  taskId: 't1',
  status: 'working',
  createdAt: '2026-07-28T10:00:00Z',
  lastUpdatedAt: '2026-07-28T10:00:01Z',
  ttlMs: 60_000,
  pollIntervalMs: 500,
};

describe('parsing task answers', () => {
  it('accepts the spec examples and keeps status-specific fields', () => {
    expect(parseCreateTaskResult({ resultType: 'task', ...base })).toMatchObject({ taskId: 't1', status: 'working' });
    const completed = parseGetTaskResult({ ...base, status: 'completed', result: { content: [] } }, 't1');
    expect(completed.result).toEqual({ content: [] });
    const input = parseGetTaskResult(
      { ...base, status: 'input_required', inputRequests: { k: { method: 'roots/list', params: {} } } },
      't1',
    );
    expect(input.inputRequests).toEqual({ k: { method: 'roots/list', params: {} } });
    expect(parseGetTaskResult({ ...base, ttlMs: null }, 't1').ttlMs).toBeNull();
    // a CreateTaskResult is a Task: a terminal seed state without its result is legal
    const seed = parseCreateTaskResult({ resultType: 'task', ...base, status: 'completed' });
    expect(seed.status).toBe('completed');
    expect(seed.result).toBeUndefined();
  });

  it('names what is missing or wrong', () => {
    const { taskId: _taskId, ...noTaskId } = base;
    expect(() => parseCreateTaskResult({ resultType: 'task', ...noTaskId })).toThrow(/taskId/);
    expect(() => parseCreateTaskResult({ resultType: 'banana', ...base })).toThrow(/resultType "banana"/);
    expect(() => parseGetTaskResult({ ...base, status: 'completed' }, 't1')).toThrow(/result/);
    expect(() => parseGetTaskResult({ ...base, status: 'failed' }, 't1')).toThrow(/error/);
    expect(() => parseGetTaskResult({ ...base, status: 'input_required' }, 't1')).toThrow(/inputRequests/);
    expect(() => parseGetTaskResult({ ...base, status: 'paused' }, 't1')).toThrow(/status/);
    expect(() => parseGetTaskResult({ ...base, createdAt: 'yesterday' }, 't1')).toThrow(/createdAt/);
    expect(() => parseGetTaskResult({ ...base, taskId: 't2' }, 't1')).toThrow(/answered with taskId t2/);
    expect(() => parseGetTaskResult([base], 't1')).toThrow(/not an object/);
  });

  it('refuses a taskId carrying a control character, and keeps every other string', () => {
    // a taskId is printed and pasted back by a person: escape sequences, bidi controls and line breaks have no place
    for (const bad of ['a\u001b[2J', 'a\nb', 'a\u009bb', 'a\u202eb', 'a\u2028b']) {
      expect(() => parseCreateTaskResult({ resultType: 'task', ...base, taskId: bad })).toThrow(/control characters/);
      expect(() => parseGetTaskResult({ ...base, taskId: bad }, bad)).toThrow(/control characters/);
    }
    // and what no ledger keeps as sent (docs/DESIGN.md rule 14) is refused by the taskId's own schema
    for (const bad of ['a\u0000', 'a\ud800', 'a\udc00b']) {
      const unstorable = /taskId must be well-formed Unicode text without NUL characters/;
      expect(() => parseCreateTaskResult({ resultType: 'task', ...base, taskId: bad })).toThrow(unstorable);
      expect(() => parseGetTaskResult({ ...base, taskId: bad }, bad)).toThrow(unstorable);
    }
    expect(() => parseGetTaskResult({ ...base, lastUpdatedAt: `${base.lastUpdatedAt}\u0000` }, base.taskId)).toThrow(
      /lastUpdatedAt must be well-formed Unicode text/,
    );
    for (const good of ['786512e2-9e0d-44bd-8f29-789f320fe840', 'tâche-é', 'a b', 'a/b:c']) {
      expect(parseCreateTaskResult({ resultType: 'task', ...base, taskId: good }).taskId).toBe(good);
    }
  });
});

describe('progressionViolation', () => {
  const known = { taskId: 't1', status: 'completed' as const, lastUpdatedAt: '2026-07-28T10:00:05Z' };
  const next = (overrides: object) => parseGetTaskResult({ ...base, ...overrides }, 't1');

  it('allows moves between open statuses and an identical terminal answer', () => {
    const open = { taskId: 't1', status: 'input_required' as const };
    expect(progressionViolation(open, next({}))).toBeUndefined();
    expect(
      progressionViolation(known, next({ status: 'completed', result: {}, lastUpdatedAt: '2026-07-28T10:00:05Z' })),
    ).toBeUndefined();
  });

  it('rejects change after terminal and going backwards, never judging by timestamps', () => {
    expect(progressionViolation(known, next({ lastUpdatedAt: '2026-07-28T10:00:06Z' }))).toMatch(
      /went backwards: terminal completed -> working/,
    );
    expect(
      progressionViolation(
        known,
        next({ status: 'failed', error: { code: 1, message: 'x' }, lastUpdatedAt: '2026-07-28T10:00:06Z' }),
      ),
    ).toMatch(/changed after terminal: completed -> failed/);
    // a server clock that stepped back: an earlier lastUpdatedAt is the server's latest word, terminal or not
    const open = { taskId: 't1', status: 'working' as const };
    expect(progressionViolation(open, next({ lastUpdatedAt: '2000-01-01T00:00:00Z' }))).toBeUndefined();
    expect(
      progressionViolation(open, next({ status: 'completed', result: {}, lastUpdatedAt: '2000-01-01T00:00:00Z' })),
    ).toBeUndefined();
  });
});
