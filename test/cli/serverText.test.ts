// Server text reaches the terminal as words only: no escape sequence or control character a server sends can repaint
// the screen, move the cursor or pass itself off as closeout's own output.
import { describe, expect, it } from 'vitest';

import { quoteServer, serverBlock, serverLine, terminalJson } from '../../src/cli/terminal/serverText.js';

describe('server text', () => {
  it('drops CSI, OSC and other escape sequences and control characters', () => {
    const hostile =
      'ok\u001b[2J\u001b[31mred\u001b[0m \u001b]8;;https://evil.example\u0007link\u001b]8;;\u0007\u0007\u0000\u009b1A done';
    expect(serverLine(hostile)).toBe('okred link done');
  });

  it('keeps line breaks in blocks and quotes every line under a margin', () => {
    expect(serverBlock('a\r\nb\rc\td')).toBe('a\nb\nc  d');
    expect(serverLine('first\n  second')).toBe('first second');
    expect(quoteServer('Deploy?\n\u001b[1Acloseout: approved')).toBe('  │ Deploy?\n  │ closeout: approved');
  });

  it('drops bidi controls, and counts Unicode line separators as line breaks', () => {
    expect(serverLine('a\u202eevil\u2066x\u2069\u200f b')).toBe('aevilx b');
    expect(serverBlock('one\u2028two\u2029three')).toBe('one\ntwo\nthree');
    expect(serverLine('one\u2028✔ completed')).toBe('one ✔ completed');
  });

  it('writes JSON a terminal cannot act on, which parses to the same value', () => {
    const value = { text: '\u001b]0;t\u0007\u009b2J\u202eA\u2028B\u007f' };
    const line = terminalJson(value);
    // eslint-disable-next-line no-control-regex
    expect(line).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2028\u2029]/);
    expect(JSON.parse(line)).toEqual(value);
  });
});
