/** `fencekeeper status <lock>`: the holder and the waiters, in grant order, with their tokens. */
import { formatToken } from '../../index.js';
import { UsageError, parse } from '../args.js';
import { ExitCode } from '../exit-codes.js';
import { HELP } from '../help.js';
import { LOCK_SERVICE_OPTIONS, lockServiceFrom } from '../services/index.js';
import { out } from '../output.js';

export async function status(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { ...LOCK_SERVICE_OPTIONS, json: { type: 'boolean' } });
  if (values.help) {
    out(HELP.status);
    return ExitCode.ok;
  }
  const name = positionals[0];
  if (name === undefined || positionals.length !== 1) throw new UsageError('status needs exactly one lock name');
  const address = lockServiceFrom(values);
  address.checkName('lock', name);
  const service = await address.connect();
  try {
    const entries = await service.queue(name);
    if (values.json) {
      out(JSON.stringify({ lock: name, queue: entries.map((e) => ({ role: e.role, token: formatToken(e.token), owner: e.owner, session: e.session, node: e.node })) }));
      return ExitCode.ok;
    }
    if (entries.length === 0) {
      out(`${name}: free (no holder, no waiters)`);
      return ExitCode.ok;
    }
    out(`${name}: held, ${entries.length - 1} waiting`);
    const rows = entries.map((e, i) => [String(i), e.role, formatToken(e.token), e.owner, e.session]);
    const header = ['#', 'role', 'token', 'owner', 'session'];
    const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] as string).length)));
    const line = (r: string[]): string => r.map((v, c) => v.padEnd(widths[c] as number)).join('  ').trimEnd();
    out(line(header));
    for (const r of rows) out(line(r));
    return ExitCode.ok;
  } finally {
    await service.close();
  }
}
