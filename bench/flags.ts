/** The command-line flags every benchmark reads. */

/** A flag that must be a positive integer; `fallback` when it is not given. */
export function positive(value: string | undefined, fallback: number): number {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${value}`);
  return n;
}
