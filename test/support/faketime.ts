/**
 * libfaketime for the clock tests: a child process whose wall clock is offset, and stepped while it runs by rewriting
 * a file (FAKETIME_TIMESTAMP_FILE, re-read on every call with FAKETIME_NO_CACHE). The monotonic clock is left alone
 * (FAKETIME_DONT_FAKE_MONOTONIC), as an NTP step or a VM snapshot restore leaves it. Installed by
 * scripts/install-test-tools.sh (Debian package `faketime`).
 */
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const LIBRARY_DIRS = ['/usr/lib/x86_64-linux-gnu/faketime', '/usr/lib/aarch64-linux-gnu/faketime', '/usr/lib/faketime'];

export interface FakeClock {
  /** Environment variables that put a child process on this clock. */
  env: Record<string, string>;
  /** Step the wall clock to this offset from the real time (libfaketime syntax: `-1h`, `+2h`, `+0`). */
  set(offset: string): void;
}

/** A wall clock at `offset` from the real one, for the child processes started with its `env`. */
export function fakeClock(offset: string): FakeClock {
  const dir = LIBRARY_DIRS.find((candidate) => existsSync(join(candidate, 'libfaketime.so.1')));
  if (!dir) throw new Error('libfaketime is missing: run scripts/install-test-tools.sh (Debian package faketime)');
  const file = join(mkdtempSync(join(tmpdir(), 'closeout-faketime-')), 'offset');
  const set = (next: string) => writeFileSync(file, `${next}\n`);
  set(offset);
  return {
    env: {
      LD_PRELOAD: join(dir, 'libfaketime.so.1'),
      FAKETIME_TIMESTAMP_FILE: file,
      FAKETIME_NO_CACHE: '1',
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    },
    set,
  };
}
