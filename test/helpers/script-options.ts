// Options of the project's scripts (npm run compare, npm run faults), as
// parseArgs hands them over: a string or nothing.

/** `--name`'s value as a positive integer, `fallback` when it was not given; a clear error otherwise. */
export function positive(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} wants a positive integer, got ${JSON.stringify(text)}`);
  return value;
}
