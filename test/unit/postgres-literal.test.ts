// The E'' literal that carries a resource name inside a simple-query message
// (no server here: the integration suite fuzzes the same names against
// PostgreSQL). Read back by the rules PostgreSQL applies to an escape string
// (a doubled quote is a quote, a backslash escapes the next character), every
// literal must give back exactly the string it was built from, and end where
// it claims to.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { InvalidArgumentError, InvalidTokenError } from '../../src/index.js';
import { checkResource, quoteLiteral, tokenLiteral } from '../../adapters/postgres/identifiers.js';

/** Parse an E'' literal at the start of `sql` as PostgreSQL's lexer would (the escapes quoteLiteral writes: \\, \uXXXX, \UXXXXXXXX); answers the value and where it ended. */
function readEscapeString(sql: string): { value: string; end: number } {
  if (!sql.startsWith("E'")) throw new Error('not an escape string');
  let value = '';
  for (let i = 2; i < sql.length; i += 1) {
    const c = sql[i]!;
    if (c === '\\') {
      const next = sql[i + 1];
      if (next === undefined) throw new Error('dangling backslash');
      if (next === 'u' || next === 'U') {
        const digits = next === 'u' ? 4 : 8;
        const hex = sql.slice(i + 2, i + 2 + digits);
        if (!/^[0-9a-f]+$/i.test(hex) || hex.length !== digits) throw new Error(`bad unicode escape at ${i}`);
        value += String.fromCodePoint(parseInt(hex, 16));
        i += 1 + digits;
        continue;
      }
      value += next;
      i += 1;
    } else if (c === "'") {
      if (sql[i + 1] === "'") {
        value += "'";
        i += 1;
      } else {
        return { value, end: i + 1 };
      }
    } else {
      value += c;
    }
  }
  throw new Error('unterminated literal');
}

const tricky = fc.array(fc.oneof(fc.constantFrom("'", '\\', "\\'", "''", '$$', "$'", '$&', ';', '😀'), fc.string({ unit: 'binary', maxLength: 3 })), { maxLength: 10 }).map((parts) => parts.join(''));

describe('quoteLiteral', () => {
  it('reads back as exactly the string, and the literal ends at its last character (fast-check)', () => {
    fc.assert(fc.property(tricky.filter((s) => !s.includes('\0')), (text) => {
      const literal = quoteLiteral(text);
      const { value, end } = readEscapeString(`${literal}; DROP TABLE x`);
      expect(value).toBe(text);
      expect(end).toBe(literal.length);
      // ASCII only: the same bytes under every client_encoding.
      expect(literal).toMatch(/^[\x00-\x7f]*$/);
    }), { numRuns: 2000 });
  });

  it('refuses NUL and lone surrogates', () => {
    for (const text of ['\0', 'a\0', '\uD800', 'a\uDFFFb']) expect(() => quoteLiteral(text)).toThrow(InvalidArgumentError);
    expect(quoteLiteral('\uD83D\uDE00')).toBe("E'\\U0001f600'");
    expect(quoteLiteral("é'\\")).toBe("E'\\u00e9''\\\\'");
  });
});

describe('checkResource and tokenLiteral', () => {
  it('a resource must be non-empty, without NUL, well-formed', () => {
    for (const bad of ['', 'a\0', '\uD800x', 'x\uDC00', 5, null]) expect(() => checkResource(bad)).toThrow(InvalidArgumentError);
    for (const good of ["it's", 'C:\\dir', '😀', 'ß', ' ']) expect(checkResource(good)).toBe(good);
  });

  it('a token literal is the digits of a valid token', () => {
    expect(tokenLiteral(34n)).toBe('34::int8');
    expect(tokenLiteral(9223372036854775807n)).toBe('9223372036854775807::int8');
    for (const bad of [0n, -1n, 2n ** 63n, '34', 34]) expect(() => tokenLiteral(bad as bigint)).toThrow(InvalidTokenError);
  });
});
