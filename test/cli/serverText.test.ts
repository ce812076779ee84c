// Server text reaches the terminal as words only: no escape sequence or control character a server sends can repaint
// the screen, move the cursor or pass itself off as closeout's own output.
import { describe, expect, it } from 'vitest';

import { quoteServer, serverBlock, serverLine } from '../../src/cli/serverText.js';

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
});
