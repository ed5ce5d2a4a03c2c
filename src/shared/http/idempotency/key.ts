// The Idempotency-Key request header (the IETF httpapi draft
// "The Idempotency-Key HTTP Header Field", section 2.1): an Item Structured
// Field (RFC 8941) whose value must be a String, sent at most once:
//
//   Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// Parsed as RFC 8941 section 4.2 says: the bare item, then any parameters
// (the draft defines none, so they are checked for syntax and ignored). Many
// clients send the key unquoted (Idempotency-Key: 8e03978e-...), which is no
// String at all; such a key is accepted when it is made only of the
// characters keys are made of in practice (letters, digits and ._~:+/=-) and
// names the same key as its quoted form. Anything else is refused: the
// caller answers 400 and runs nothing.

/** Keys are random identifiers (a UUID is 36 characters): longer ones are refused, as common APIs do. */
export const MAX_KEY_LENGTH = 255;

export type ParsedKey = { readonly ok: true; readonly key: string } | { readonly ok: false; readonly reason: string };

// RFC 8941 section 3.3.3: chars of a String are %x20-21 / %x23-5B / %x5D-7E,
// plus the escapes \" and \\.
const STRING = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"/;
const UNQUOTED = /^[A-Za-z0-9._~:+/=-]+$/;
// Section 3.1.2: parameters, each `;` *SP key [ "=" bare-item ].
const PARAMETER = /^;\x20*[a-z*][a-z0-9_\-.*]*(?:=(?:-?[0-9]{1,15}(?:\.[0-9]{1,3})?|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"|[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*|:[A-Za-z0-9+/=]*:|\?[01]))?/;

/**
 * The value is a list of keys, as repeated header lines joined by a hop (RFC
 * 9110 section 5.3) or by the Fetch API's Headers: a comma outside one quoted
 * key and its parameters. The caller answers it as a repeated header, so
 * every guard answers alike whether it sees the lines or their join.
 */
export function isKeyList(value: string): boolean {
  return value.includes(',') && !/^\s*"(?:[^"\\]|\\.)*"\s*(?:;[^,]*)?$/.test(value);
}

/** The key a header value carries, or why it carries none. */
export function parseIdempotencyKey(value: string): ParsedKey {
  // Leading and trailing spaces are discarded (section 4.2); Node's parser
  // already drops them around a field value.
  const text = value.replace(/^\x20+|\x20+$/g, '');
  if (text.length === 0) return refuse('the Idempotency-Key header is empty');
  let key: string;
  let rest: string;
  const quoted = STRING.exec(text);
  if (quoted !== null) {
    key = quoted[1]!.replace(/\\(["\\])/g, '$1');
    rest = text.slice(quoted[0].length);
  } else if (text.startsWith('"')) {
    return refuse('the Idempotency-Key header must be a Structured Field String: a closing quote is missing, or it holds a character other than printable ASCII (or a backslash not escaping " or \\)');
  } else {
    const end = text.indexOf(';');
    key = end === -1 ? text : text.slice(0, end);
    rest = end === -1 ? '' : text.slice(end);
    if (!UNQUOTED.test(key)) return refuse('the Idempotency-Key header must be a quoted string ("...") or a key of letters, digits and ._~:+/=-');
  }
  while (rest.length > 0) {
    const parameter = PARAMETER.exec(rest);
    if (parameter === null) return refuse('the Idempotency-Key header has something after its key that is not a parameter (a list of keys is not allowed)');
    rest = rest.slice(parameter[0].length);
  }
  if (key.length === 0) return refuse('the Idempotency-Key must not be empty');
  if (key.length > MAX_KEY_LENGTH) return refuse(`the Idempotency-Key must be at most ${MAX_KEY_LENGTH} characters, got ${key.length}`);
  return { ok: true, key };
}

function refuse(reason: string): ParsedKey {
  return { ok: false, reason };
}
