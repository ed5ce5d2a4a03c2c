// The CLI is the one place in the package that writes to the console.

export function out(text: string): void {
  process.stdout.write(`${text}\n`);
}

export function err(text: string): void {
  process.stderr.write(`fencekeeper: ${text}\n`);
}
