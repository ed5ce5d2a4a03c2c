// Reading a guard's request header, the same way under every framework: one
// occurrence only (a repeat is refused, never joined or picked), and for the
// fencing header a strict decimal token or a sequencer's text.
import { InvalidArgumentError, SEQUENCER_FORMAT, parseFencing, type FencingToken, type Sequencer } from '../../index.js';
import type { Problem } from './problem.js';

/** RFC 9110 §5.1 field-name: a token. */
export const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;

/** The header was sent more than once. */
export const REPEATED: unique symbol = Symbol('repeated');

/** A header as a guard found it: its one value, absent (undefined), or sent more than once. */
export type HeaderValue = string | undefined | typeof REPEATED;

/** `header` in lower case, or INVALID_ARGUMENT (for `who`'s options) when it is not a header name. */
export function headerOption(header: string | undefined, fallback: string, who: string): string {
  const name = (header ?? fallback).toLowerCase();
  if (!FIELD_NAME.test(name)) throw new InvalidArgumentError(`${who}: not an HTTP header name: ${JSON.stringify(header)}`);
  return name;
}

/**
 * A request header's only value from Node's rawHeaders, where every
 * occurrence is kept as sent (req.headers joins the repeats of an unknown
 * header with ', ' and keeps only the first of some known ones, so it cannot
 * tell a repeat for every name). `name` is lower case.
 */
export function singleHeader(rawHeaders: readonly string[], name: string): HeaderValue {
  let value: string | undefined;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const field = rawHeaders[i]!;
    if (field.length !== name.length || field.toLowerCase() !== name) continue;
    if (value !== undefined) return REPEATED;
    value = rawHeaders[i + 1]!;
  }
  return value;
}

/** singleHeader() on a Node request (its rawHeaders; req.headers only for a request object that has none). */
export function nodeHeader(req: { readonly rawHeaders?: readonly string[]; readonly headers: Record<string, string | string[] | undefined> }, name: string): HeaderValue {
  const raw = req.rawHeaders;
  if (raw !== undefined) return singleHeader(raw, name);
  const value = req.headers[name];
  return Array.isArray(value) ? REPEATED : value;
}

/**
 * A header's value from a Fetch API Headers object, which joins the
 * occurrences of a repeated header with ", " and so keeps no count: the
 * parse of the value tells a list (a comma where the header's syntax has
 * none) as repeated, the same for every guard. An adapter that has the raw
 * header list (Node's rawHeaders) reads that instead.
 */
export function fetchHeader(headers: Headers, name: string): HeaderValue {
  return headers.get(name) ?? undefined;
}

/** What the fencing header presented: the token, and the sequencer when it was one. */
export interface PresentedToken {
  readonly token: FencingToken;
  readonly presented: FencingToken | Sequencer;
}

/** The last bare token presentedToken parsed, and its answer (a bigint and a frozen object: safe to share). */
let lastBare: string | undefined;
let lastPresented: PresentedToken | undefined;

/** The fencing header's token, or the 428/400 answer for a missing, repeated or malformed one. */
export function presentedToken(text: HeaderValue, header: string): PresentedToken | Problem {
  if (text === undefined) return { status: 428, code: 'MISSING_TOKEN', detail: `this request needs a fencing token in the ${header} header` };
  // A comma: a list, which is what repeated lines are (RFC 9110 section 5.3
  // lets any hop join them into one), and no valid value holds one. So every
  // guard answers alike, whether it sees the lines (Node) or their join (Fetch).
  if (text === REPEATED || text.includes(',')) return { status: 400, code: 'REPEATED_TOKEN', detail: `the ${header} header must appear once` };
  // The same bare token as the request before (a holder sends one token for
  // all its writes): the same answer, without parsing it or allocating again.
  if (text === lastBare) return lastPresented!;
  // A bare token (decimal) or a sequencer (the token with its lock: SEQUENCER_FORMAT).
  try {
    const presented = parseFencing(text);
    if (typeof presented !== 'bigint') return { token: presented.token, presented };
    const answer: PresentedToken = Object.freeze({ token: presented, presented });
    lastBare = text;
    lastPresented = answer;
    return answer;
  } catch {
    return { status: 400, code: 'INVALID_TOKEN', detail: `the ${header} header must be a decimal integer in 1..9223372036854775807 or a sequencer (${SEQUENCER_FORMAT})` };
  }
}
