/**
 * The demo's handle on one lock holder running in a process of its own
 * (holder.ts), so it can be frozen with SIGSTOP the way a long
 * garbage-collection pause freezes a real one. The holder reports in JSON
 * lines on stdout and takes 'go' lines on stdin.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const HOLDER = fileURLToPath(new URL('./holder.js', import.meta.url));

export interface HolderMessage {
  readonly event: string;
  readonly at: number;
  readonly [field: string]: unknown;
}

export class HolderProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  readonly #messages: HolderMessage[] = [];
  readonly #waiters: { event: string; resolve: (m: HolderMessage) => void }[] = [];
  #stderr = '';

  constructor(actor: string, env: NodeJS.ProcessEnv) {
    this.child = spawn(process.execPath, [HOLDER], { env: { ...env, DEMO_ACTOR: actor }, stdio: ['pipe', 'pipe', 'pipe'] });
    this.exited = once(this.child, 'exit').then(([code]) => code as number | null);
    this.child.stderr?.setEncoding('utf8').on('data', (c: string) => (this.#stderr += c));
    createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      let message: HolderMessage;
      try {
        message = JSON.parse(line) as HolderMessage;
      } catch {
        return; // not a report
      }
      this.#messages.push(message);
      for (const w of [...this.#waiters]) {
        if (w.event === message.event || message.event === 'error') {
          this.#waiters.splice(this.#waiters.indexOf(w), 1);
          w.resolve(message);
        }
      }
    });
  }

  get messages(): readonly HolderMessage[] {
    return this.#messages;
  }

  /** The next message of this kind (or the holder's error report, or its death). */
  async next(event: string, timeoutMs = 30_000): Promise<HolderMessage> {
    const seen = this.#messages.find((m) => m.event === event || m.event === 'error');
    const waiting =
      seen !== undefined
        ? Promise.resolve(seen)
        : new Promise<HolderMessage>((resolve) => this.#waiters.push({ event, resolve }));
    let timer: NodeJS.Timeout | undefined;
    const died = this.exited.then((code) => {
      throw new Error(`demo holder exited (${code}) before '${event}': ${this.#stderr.trim()}`);
    });
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`demo holder: no '${event}' within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      const message = await Promise.race([waiting, died, late]);
      if (message.event === 'error') throw new Error(`demo holder failed: ${String(message.message)}`);
      return message;
    } finally {
      clearTimeout(timer);
    }
  }

  send(line: string): void {
    this.child.stdin?.write(`${line}\n`);
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGCONT');
      this.child.kill('SIGKILL');
    }
  }
}
