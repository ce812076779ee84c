// While a prompt owns the terminal, nothing else is printed into it: lines, JSON events and remarks wait, then come
// out in the order they were made once the last open prompt ends.
import { describe, expect, it } from 'vitest';

import { Output } from '../../src/cli/terminal/output.js';

function capture(): { stream: NodeJS.WriteStream; text: () => string } {
  let text = '';
  const stream = { write: (chunk: string) => ((text += chunk), true), isTTY: false } as unknown as NodeJS.WriteStream;
  return { stream, text: () => text };
}

describe('Output while a prompt is open', () => {
  it('holds lines and remarks until the last prompt ends, then prints them in order', () => {
    const stdout = capture();
    const stderr = capture();
    const out = new Output({}, stdout.stream, stderr.stream);
    out.line('before');
    out.beginPrompt();
    out.line('closed out');
    out.aside('a remark');
    out.beginPrompt();
    out.line('second');
    out.endPrompt();
    expect(stdout.text()).toBe('before\n');
    expect(stderr.text()).toBe('');
    out.endPrompt();
    expect(stdout.text()).toBe('before\nclosed out\nsecond\n');
    expect(stderr.text()).toBe('a remark\n');
    out.endPrompt(); // one too many: harmless
    out.line('after');
    expect(stdout.text()).toBe('before\nclosed out\nsecond\nafter\n');
  });

  it('holds JSON events the same way', () => {
    const stdout = capture();
    const out = new Output({ json: true }, stdout.stream, capture().stream);
    out.beginPrompt();
    out.event({ event: 'closeout', taskId: 't' });
    expect(stdout.text()).toBe('');
    out.endPrompt();
    expect(stdout.text()).toBe('{"event":"closeout","taskId":"t"}\n');
  });
});
