// The relative links of Markdown pages, and whether each lands on a file of
// the package and on a heading of that file: shared by the unit test of the
// repository's pages (test/unit/docs-pages.test.ts) and the packed package's
// test (test/integration/package/pack.test.ts), so a page cannot point at a
// file the tarball lacks.
import { posix } from 'node:path';

/** One `[text](target)` of a page, outside code blocks and code spans. */
export interface DocLink {
  readonly line: number;
  readonly target: string;
}

/** The lines of a page that are prose: fenced code blocks blanked (line numbers kept). */
function proseLines(markdown: string): string[] {
  let fence: string | null = null;
  return markdown.split('\n').map((line) => {
    const mark = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence === null && mark !== undefined) {
      fence = mark;
      return '';
    }
    if (fence !== null) {
      if (mark !== undefined && mark[0] === fence[0] && mark.length >= fence.length && line.trim() === mark) fence = null;
      return '';
    }
    return line;
  });
}

/** Every inline link of a page (not inside code), with its line number. */
export function markdownLinks(markdown: string): DocLink[] {
  const out: DocLink[] = [];
  for (const [i, raw] of proseLines(markdown).entries()) {
    const line = raw.replace(/`[^`]*`/g, '');
    for (const match of line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push({ line: i + 1, target: match[1] as string });
  }
  return out;
}

/** The anchors GitHub gives a page's headings (lower case, punctuation dropped, spaces to '-', repeats numbered). */
export function headingAnchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of proseLines(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/**
 * The guides of entry points being built while the README already lists
 * them: a link to one may wait for its page only while package.json does not
 * export the entry yet (`exports`: package.json's). Once the entry is
 * exported, its guide must exist like any other.
 */
export function pendingGuide(exports: Record<string, unknown>): (file: string) => boolean {
  const PENDING: Record<string, string> = { 'docs/fetch.md': './fetch', 'docs/hono.md': './hono', 'docs/fastify.md': './fastify' };
  return (file) => file in PENDING && !((PENDING[file] as string) in exports);
}

/** A link that leaves the page set: an absolute URL (http:, https:, mailto:). */
export const isExternal = (target: string): boolean => /^[a-z][a-z0-9+.-]*:/i.test(target);

/**
 * What is wrong with each relative link of `page` (a path from the package
 * root): its file is not among `files` (the package's files, from the root),
 * or its `#anchor` names no heading of that file. `read` gives a file's text
 * (for anchors into Markdown files). `allowMissing` may excuse a missing file.
 */
export function brokenLinks(
  page: string,
  markdown: string,
  files: ReadonlySet<string>,
  read: (path: string) => string,
  allowMissing: (path: string) => boolean = () => false,
): string[] {
  const problems: string[] = [];
  for (const { line, target } of markdownLinks(markdown)) {
    if (isExternal(target)) continue;
    const [path = '', anchor] = target.split('#', 2) as [string, string | undefined];
    const file = path === '' ? page : posix.normalize(posix.join(posix.dirname(page), decodeURI(path)));
    const where = `${page}:${line} (${target})`;
    if (!files.has(file)) {
      if (!allowMissing(file)) problems.push(`${where}: ${file} is not a file of the package`);
      continue;
    }
    if (anchor !== undefined && file.endsWith('.md') && !headingAnchors(read(file)).has(anchor)) problems.push(`${where}: ${file} has no heading #${anchor}`);
  }
  return problems;
}
