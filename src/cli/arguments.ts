/** Parsers for command-line values: each rejects bad input with a message that says what was expected. */
import { InvalidArgumentError } from 'commander';

export function parsePort(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('expected a port number 0..65535');
  return n;
}

export function parsePositiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

export function parseNonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected a non-negative integer');
  return n;
}

export function parseUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(`"${value}" is not a URL: expected e.g. http://127.0.0.1:3000/mcp`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidArgumentError(`expected an http:// or https:// URL, got ${url.protocol}`);
  }
  return url.toString();
}

export function parseJsonObject(value: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (error) {
    throw new InvalidArgumentError(`not valid JSON (${(error as Error).message}): quote it, e.g. --args '{"n":1}'`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InvalidArgumentError('expected a JSON object, e.g. {"n":1}');
  }
  return parsed as Record<string, unknown>;
}
