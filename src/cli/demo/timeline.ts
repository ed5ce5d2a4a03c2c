/**
 * The demo's timeline as a picture: a hand-written SVG (no charting library,
 * so nothing more ships with the CLI) drawn from the events the demo recorded
 * as it ran, at their real times. One lane per holder (its grant as a bar,
 * its writes to the three resources as marks: accepted or refused), a lane for
 * the lock service (the moment it ended A's grant), A's pause as a hatched band.
 *
 * Most of the run is A's pause (the session timeout), while everything that
 * matters after it happens within a fraction of a second; a linear axis would
 * pile those marks on each other. So the quiet middle of the pause is drawn
 * compressed, as an explicit break in the axis labelled with its length; the
 * two sides of it are linear and their ticks carry real times.
 */

/** One moment of the demo, at its real time (epoch milliseconds). */
export type TimelineEvent =
  | { readonly kind: 'acquire'; readonly actor: string; readonly at: number; readonly token: string }
  | { readonly kind: 'write'; readonly actor: string; readonly at: number; readonly resource: string; readonly outcome: string }
  | { readonly kind: 'pause' | 'resume' | 'release' | 'end'; readonly actor: string; readonly at: number }
  | { readonly kind: 'expire'; readonly actor: string; readonly at: number; readonly what: string };

export interface TimelineInfo {
  /** The title's second line: the servers, the session timeout, when it ran. */
  readonly subtitle: string;
  readonly unfenced: boolean;
}

const W = 980;
const PLOT_X = 170;
const PLOT_END = W - 190; // the right margin carries the end-of-run notes
const BREAK_W = 70;
const COLOR: Record<string, string> = { A: '#2f6db5', B: '#7b4bb3' };
const ACCEPTED = '#2e7d32';
const REFUSED = '#c62828';
const RESOURCES = [
  ['postgres', 'PostgreSQL row'],
  ['s3', 'S3 object'],
  ['http', 'HTTP service'],
] as const;

const esc = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const num = (x: number): string => (Math.round(x * 10) / 10).toString();
/** A width estimate for 12-13 px sans-serif text (no font metrics here). */
const textWidth = (text: string, size = 12): number => text.length * size * 0.56;

/** Time to x: linear where things happen, each long quiet stretch squeezed into BREAK_W. */
interface Scale {
  x(at: number): number;
  /** The compressed intervals. */
  readonly gaps: readonly { readonly from: number; readonly to: number }[];
  /** The linear intervals between them. */
  readonly segments: readonly { readonly from: number; readonly to: number }[];
}

/** Stretches of more than QUIET ms with no event become breaks, keeping MARGIN ms of each side linear. */
const QUIET = 1000;
const MARGIN = 200;

function scaleOf(times: readonly number[]): Scale {
  const sorted = [...times].sort((p, q) => p - q);
  const start = sorted[0] ?? 0;
  const end = sorted.at(-1) ?? start + 1;
  const gaps: { from: number; to: number }[] = [];
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1] as number;
    const next = sorted[i] as number;
    if (next - prev > QUIET) gaps.push({ from: prev + MARGIN, to: next - MARGIN });
  }
  const segments: { from: number; to: number }[] = [];
  let from = start;
  for (const g of gaps) {
    segments.push({ from, to: g.from });
    from = g.to;
  }
  segments.push({ from, to: end });
  const linear = segments.reduce((n, seg) => n + (seg.to - seg.from), 0);
  const k = (PLOT_END - PLOT_X - gaps.length * BREAK_W) / Math.max(1, linear);
  return {
    x(at) {
      let x = PLOT_X;
      for (let i = 0; i < segments.length; i++) {
        const seg = segments[i] as { from: number; to: number };
        if (at <= seg.to || i === segments.length - 1) return x + (Math.max(at, seg.from) - seg.from) * k;
        x += (seg.to - seg.from) * k;
        const g = gaps[i] as { from: number; to: number };
        if (at < g.to) return x + ((at - g.from) / (g.to - g.from)) * BREAK_W;
        x += BREAK_W;
      }
      return x;
    },
    gaps,
    segments,
  };
}

/** Tick times inside [from, to] (relative to start), at least ~55 px apart. */
function ticks(scale: Scale, start: number): number[] {
  const out: number[] = [];
  for (const seg of scale.segments) {
    const pxPerMs = (scale.x(seg.to) - scale.x(seg.from)) / Math.max(1, seg.to - seg.from);
    const step = [50, 100, 200, 250, 500, 1000, 2000, 5000].find((s) => s * pxPerMs >= 55) ?? 10_000;
    for (let t = Math.ceil((seg.from - start) / step) * step; t <= seg.to - start; t += step) out.push(t);
  }
  return out;
}

function mark(x: number, y: number, outcome: string): string {
  const ok = outcome === 'accepted';
  const color = ok ? ACCEPTED : outcome === 'refused' ? REFUSED : '#888';
  const glyph = ok
    ? `<path d="M${num(x - 3.5)} ${num(y + 0.2)} l2.6 2.8 l4.8 -5.6" fill="none" stroke="white" stroke-width="2"/>`
    : `<path d="M${num(x - 3)} ${num(y - 3)} l6 6 M${num(x + 3)} ${num(y - 3)} l-6 6" stroke="white" stroke-width="2"/>`;
  return `<g class="write ${esc(outcome)}"><circle cx="${num(x)}" cy="${num(y)}" r="7" fill="${color}"/>${glyph}</g>`;
}

/**
 * The demo's timeline as a standalone SVG document, drawn from the events the
 * demo recorded: lanes for holder A, the lock service and holder B; A's pause
 * as a hatched band; the moment the lock service ended A's grant as a dashed
 * line; each write as a green tick (accepted) or a red cross (refused).
 */
export function timelineSvg(events: readonly TimelineEvent[], info: TimelineInfo): string {
  const first = (kind: TimelineEvent['kind'], actor?: string): TimelineEvent | undefined => events.find((e) => e.kind === kind && (actor === undefined || e.actor === actor));
  const times = events.map((e) => e.at);
  const start = first('acquire', 'A')?.at ?? Math.min(...times);
  const end = Math.max(...times);
  const pause = first('pause', 'A')?.at;
  const resume = first('resume', 'A')?.at;
  const expire = first('expire');
  const scale = scaleOf(times);
  const x = scale.x;

  const out: string[] = [];
  // Labels that lines may cross (the expiry's dashed line, the pause band's edges) go on top, each with a halo.
  const over: string[] = [];
  const HALO = 'paint-order="stroke" stroke="white" stroke-width="4" stroke-linejoin="round"';
  const lanes: { actor: string; label: string; top: number; height: number }[] = [];
  let y = 86;
  for (const actor of ['A', 'service', 'B']) {
    const height = actor === 'service' ? 44 : 104;
    lanes.push({ actor, label: actor, top: y, height });
    y += height + 8;
  }
  const lanesBottom = y - 8;
  const laneOf = (actor: string) => lanes.find((l) => l.actor === actor) as { top: number; height: number };
  const rowY = (actor: string, resource: string): number => laneOf(actor).top + 44 + RESOURCES.findIndex(([r]) => r === resource) * 20;

  out.push(
    `<rect width="${W}" height="__H__" fill="white"/>`,
    `<text x="16" y="30" font-size="18" font-weight="600">fencekeeper demo: a paused lock holder${info.unfenced ? ', fencing OFF' : ''}</text>`,
    `<text x="16" y="52" font-size="12.5" fill="#555">${esc(info.subtitle)}</text>`,
  );

  // Lanes: background, labels, resource rows.
  for (const lane of lanes) {
    out.push(`<rect x="8" y="${lane.top}" width="${W - 16}" height="${lane.height}" fill="${lane.actor === 'service' ? '#f7f7f2' : '#f5f7fa'}" rx="4"/>`);
    if (lane.actor === 'service') {
      out.push(
        `<text x="16" y="${lane.top + 19}" font-size="13" font-weight="600">lock service</text>`,
        `<text x="16" y="${lane.top + 35}" font-size="12" fill="#555">${esc(expire?.actor ?? '')}</text>`,
      );
      continue;
    }
    // The token is on the grant's bar; the resource rows' labels take the rest of this column.
    out.push(`<text x="16" y="${lane.top + 24}" font-size="13" font-weight="600" fill="${COLOR[lane.actor]}">holder ${lane.actor}</text>`);
    for (const [resource, label] of RESOURCES) {
      const ry = rowY(lane.actor, resource);
      out.push(
        `<text x="${PLOT_X - 10}" y="${ry + 4}" font-size="11.5" fill="#444" text-anchor="end">${label}</text>`,
        `<line x1="${PLOT_X}" y1="${ry}" x2="${PLOT_END}" y2="${ry}" stroke="#e2e5ea"/>`,
      );
    }
  }

  // A's pause: a hatched band over A's lane, labelled in the middle.
  if (pause !== undefined) {
    const a = laneOf('A');
    const x1 = x(pause);
    const x2 = x(resume ?? end);
    out.push(
      `<rect x="${num(x1)}" y="${a.top}" width="${num(x2 - x1)}" height="${a.height}" fill="url(#paused)" stroke="#999" stroke-dasharray="3 3"/>`,
    );
    const seconds = (((resume ?? end) - pause) / 1000).toFixed(1);
    const label = `A frozen (SIGSTOP) ${seconds} s`;
    const cx = (x1 + x2) / 2;
    over.push(`<rect x="${num(cx - textWidth(label) / 2 - 6)}" y="${rowY('A', 's3') - 11}" width="${num(textWidth(label) + 12)}" height="20" fill="white" stroke="#999" rx="3"/>`);
    over.push(`<text x="${num(cx)}" y="${rowY('A', 's3') + 4}" font-size="12" text-anchor="middle" fill="#333">${label}</text>`);
  }

  // Grants: a solid bar while the holder holds the lock; for A, a dashed one from the moment the lock service ended its grant.
  for (const actor of ['A', 'B']) {
    const got = first('acquire', actor);
    if (got === undefined) continue;
    const lane = laneOf(actor);
    const lost = actor === 'A' ? expire?.at : undefined;
    const until = lost ?? first('release', actor)?.at ?? first('end', actor)?.at ?? end;
    const x1 = x(got.at);
    const x2 = Math.max(x(until), x1 + 3);
    const barY = lane.top + 10;
    out.push(`<rect class="grant" x="${num(x1)}" y="${barY}" width="${num(x2 - x1)}" height="18" fill="${COLOR[actor]}" rx="3"/>`);
    const label = `holds the lock (token ${(got as { token: string }).token})`;
    if (textWidth(label) < x2 - x1 - 10) out.push(`<text x="${num(x1 + 6)}" y="${barY + 13}" font-size="12" fill="white">${esc(label)}</text>`);
    else {
      // Beside the bar: on its right if the plot has room there, else on its left.
      const text = actor === 'B' ? `${label}, writes, releases` : label;
      const right = x2 + 6 + textWidth(text) <= PLOT_END;
      over.push(`<text x="${num(right ? x2 + 6 : x1 - 6)}" y="${barY + 13}" font-size="12" text-anchor="${right ? 'start' : 'end'}" fill="${COLOR[actor]}" ${HALO}>${esc(text)}</text>`);
    }
    if (lost !== undefined) {
      const stop = x(first('end', actor)?.at ?? end);
      out.push(`<rect class="lost" x="${num(x2)}" y="${barY}" width="${num(Math.max(stop - x2, 3))}" height="18" fill="none" stroke="${COLOR[actor]}" stroke-width="1.5" stroke-dasharray="5 3" rx="3"/>`);
      const note = 'lock gone, A does not know';
      if (textWidth(note) < stop - x2 - 10) over.push(`<text x="${num(x2 + 6)}" y="${barY + 13}" font-size="12" fill="${COLOR[actor]}" ${HALO}>${note}</text>`);
    }
  }

  // The lock service ends A's grant: a dashed line through every lane, labelled in the service's lane.
  if (expire !== undefined && expire.kind === 'expire') {
    const ex = x(expire.at);
    out.push(`<line class="expire" x1="${num(ex)}" y1="${lanes[0]?.top ?? 0}" x2="${num(ex)}" y2="${lanesBottom}" stroke="${REFUSED}" stroke-width="1.5" stroke-dasharray="6 4"/>`);
    const s = laneOf('service');
    const what = `${expire.what}`;
    const when = `at ${((expire.at - start) / 1000).toFixed(2)} s: the lock is free`;
    // The lane is empty but for this note: right of the line if it fits before the margin, else left.
    const right = ex + 8 + textWidth(what) <= W - 16;
    const tx = right ? ex + 8 : ex - 8;
    const anchor = right ? 'start' : 'end';
    over.push(
      `<text x="${num(tx)}" y="${s.top + 19}" font-size="12" text-anchor="${anchor}" fill="${REFUSED}">${esc(what)}</text>`,
      `<text x="${num(tx)}" y="${s.top + 35}" font-size="11.5" text-anchor="${anchor}" fill="#555">${esc(when)}</text>`,
    );
  }

  out.push(...over);

  // Writes, one row per resource; and what each holder's last writes came to, in the right margin.
  for (const actor of ['A', 'B']) {
    const writes = events.filter((e): e is Extract<TimelineEvent, { kind: 'write' }> => e.kind === 'write' && e.actor === actor);
    for (const w of writes) out.push(mark(x(w.at), rowY(actor, w.resource), w.outcome));
    const last = writes.slice(-3);
    if (last.length === 0) continue;
    const refused = last.filter((w) => w.outcome === 'refused').length;
    const accepted = last.filter((w) => w.outcome === 'accepted').length;
    const stale = actor === 'A' && writes.length > 3;
    const head = stale ? 'after resuming, old token:' : `${actor}'s writes:`;
    const body = refused === last.length ? `all ${last.length} refused` : accepted === last.length ? `all ${last.length} accepted` : `${accepted} accepted, ${refused} refused`;
    const color = stale ? (refused === last.length ? REFUSED : '#b26a00') : ACCEPTED;
    out.push(
      `<text x="${PLOT_END + 16}" y="${rowY(actor, 'postgres') + 4}" font-size="12" fill="#333">${esc(head)}</text>`,
      `<text x="${PLOT_END + 16}" y="${rowY(actor, 's3') + 6}" font-size="13" font-weight="600" fill="${color}">${esc(body)}</text>`,
    );
    if (stale && accepted > 0) out.push(`<text x="${PLOT_END + 16}" y="${rowY(actor, 'http') + 6}" font-size="12" fill="#b26a00">B's data overwritten</text>`);
  }

  // The time axis, with the break drawn where the pause is squeezed.
  const axisY = lanesBottom + 14;
  out.push(`<line x1="${PLOT_X}" y1="${axisY}" x2="${PLOT_END}" y2="${axisY}" stroke="#333"/>`);
  for (const t of ticks(scale, start)) {
    const tx = x(start + t);
    out.push(
      `<line x1="${num(tx)}" y1="${axisY}" x2="${num(tx)}" y2="${axisY + 5}" stroke="#333"/>`,
      `<text x="${num(tx)}" y="${axisY + 18}" font-size="11.5" text-anchor="middle" fill="#333">${(t / 1000).toFixed(t % 1000 === 0 ? 0 : t % 100 === 0 ? 1 : 2)} s</text>`,
    );
  }
  for (const gap of scale.gaps) {
    const g1 = x(gap.from);
    const g2 = x(gap.to);
    out.push(
      `<rect x="${num(g1 + 4)}" y="${axisY - 6}" width="${num(g2 - g1 - 8)}" height="12" fill="white"/>`,
      `<path d="M${num(g1 + 4)} ${axisY + 6} l4 -12 M${num(g2 - 8)} ${axisY + 6} l4 -12" stroke="#333"/>`,
      `<text x="${num((g1 + g2) / 2)}" y="${axisY + 18}" font-size="11" text-anchor="middle" fill="#666">+${((gap.to - gap.from) / 1000).toFixed(1)} s</text>`,
    );
  }
  out.push(`<text x="${(PLOT_X + PLOT_END) / 2}" y="${axisY + 38}" font-size="12" text-anchor="middle" fill="#333">seconds since A was granted the lock (a break in the axis squeezes a stretch where nothing happened)</text>`);

  // Legend.
  const ly = axisY + 64;
  const items: string[] = [];
  let lx = 16;
  let rowY0 = ly;
  // A legend entry: its sample drawn by `shape` at (x, y), its label after it; a new line when the width is used up.
  const item = (shape: (x: number, y: number) => string, label: string): void => {
    if (lx + 30 + textWidth(label) > W - 16) {
      lx = 16;
      rowY0 += 24;
    }
    items.push(shape(lx, rowY0), `<text x="${lx + 30}" y="${rowY0 + 4}" font-size="12" fill="#333">${esc(label)}</text>`);
    lx += 30 + textWidth(label) + 14;
  };
  item((lx, y) => `<rect x="${lx}" y="${y - 7}" width="24" height="14" fill="${COLOR.A}" rx="3"/>`, 'holds the lock');
  item((lx, y) => `<rect x="${lx}" y="${y - 7}" width="24" height="14" fill="none" stroke="${COLOR.A}" stroke-dasharray="5 3" rx="3"/>`, 'lock lost, still running');
  item((lx, y) => `<rect x="${lx}" y="${y - 7}" width="24" height="14" fill="url(#paused)" stroke="#999" stroke-dasharray="3 3"/>`, 'paused');
  item((lx, y) => `<line x1="${lx + 12}" y1="${y - 8}" x2="${lx + 12}" y2="${y + 8}" stroke="${REFUSED}" stroke-width="1.5" stroke-dasharray="6 4"/>`, 'lock service ends the grant');
  item((lx, y) => mark(lx + 12, y, 'accepted'), 'accepted');
  item((lx, y) => mark(lx + 12, y, 'refused'), 'refused (stale token)');
  out.push(...items);

  const height = rowY0 + 24;
  const defs =
    '<defs><pattern id="paused" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
    '<rect width="8" height="8" fill="#ececec"/><line x1="0" y1="0" x2="0" y2="8" stroke="#cfcfcf" stroke-width="3"/></pattern></defs>';
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" viewBox="0 0 ${W} ${height}" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif">\n` +
    `${defs}\n${out.join('\n').replace('__H__', String(height))}\n</svg>\n`
  );
}
