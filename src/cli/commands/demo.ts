/** `fencekeeper demo`: the flags; the demo itself lives in ../demo/ and loads only when it runs. */
import { UsageError, parse } from '../args.js';
import { ExitCode } from '../exit-codes.js';
import { HELP } from '../help.js';
import { out } from '../output.js';

export async function demo(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { unfenced: { type: 'boolean' }, metrics: { type: 'boolean' }, 'lock-service': { type: 'string' }, timeline: { type: 'string' } });
  if (values.help) {
    out(HELP.demo);
    return ExitCode.ok;
  }
  if (positionals.length > 0) throw new UsageError('demo takes no arguments');
  const { runDemo } = await import('../demo/index.js');
  const lockService = values['lock-service'] as string | undefined;
  const timeline = values.timeline as string | undefined;
  return runDemo({
    ...(values.unfenced === true ? { unfenced: true } : {}),
    ...(values.metrics === true ? { metrics: true } : {}),
    ...(lockService !== undefined ? { lockService } : {}),
    ...(timeline !== undefined ? { timeline } : {}),
  });
}
