// `closeout console --host`: bound to any interface but loopback the console requires a token (README.md, "The
// console"; docs/cli.md); on loopback it requires one only when given. The e2e test (test/e2e/console.test.ts) checks
// that a console with a token refuses every request without it.
import { describe, expect, it } from 'vitest';

import { CliError } from '../../src/cli/cliError.js';
import { consoleToken } from '../../src/cli/commands/console.js';

describe('consoleToken', () => {
  it.each(['0.0.0.0', '::', '192.168.1.20', '10.0.0.7', 'fe80::1', 'console.example.org', '::ffff:127.0.0.1'])(
    'makes up a random token for %s, a new one each time',
    (host) => {
      const first = consoleToken(host, undefined);
      const second = consoleToken(host, undefined);
      expect(first).toMatch(/^[A-Za-z0-9_-]{32}$/);
      expect(second).toMatch(/^[A-Za-z0-9_-]{32}$/);
      expect(second).not.toBe(first);
    },
  );

  it.each(['127.0.0.1', '127.0.0.2', '::1', 'localhost', 'LOCALHOST'])('requires none on loopback (%s)', (host) => {
    expect(consoleToken(host, undefined)).toBeUndefined();
  });

  it('keeps a token given, on loopback or not', () => {
    expect(consoleToken('127.0.0.1', 'a-token-of-twenty-chars')).toBe('a-token-of-twenty-chars');
    expect(consoleToken('0.0.0.0', 'a-token-of-twenty-chars')).toBe('a-token-of-twenty-chars');
  });

  it('refuses a token shorter than 16 characters, saying so', () => {
    expect(() => consoleToken('0.0.0.0', 'short')).toThrow(CliError);
    expect(() => consoleToken('0.0.0.0', 'short')).toThrow('--token must be at least 16 characters');
  });
});
