import { InvalidArgumentError } from 'commander';

/** A failure the user can fix: printed as one line (what is wrong and what to do), exit code 1 unless given. */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}

export function parsePort(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('expected a port number 0..65535');
  return n;
}
