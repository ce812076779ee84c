/**
 * A failure the user can fix: printed as one line (what is wrong and what to do), exit code 1 unless given.
 * An empty message exits quietly (the command already printed why).
 */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}
