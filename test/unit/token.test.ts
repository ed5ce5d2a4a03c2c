import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidTokenError } from '../../src/errors.js';
import { assertToken, formatToken, MAX_TOKEN, parseToken } from '../../src/token.js';

const TWO_63 = 1n << 63n;

/** The reference rule, written independently of the implementation. */
function isCanonical(text: string): boolean {
  if (text.length === 0 || text.length > 19) return false;
  for (const ch of text) if (ch < '0' || ch > '9') return false;
  if (text[0] === '0') return false;
  return BigInt(text) < TWO_63;
}

function rejects(input: unknown): InvalidTokenError {
  try {
    parseToken(input as string);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidTokenError);
    expect((error as InvalidTokenError).code).toBe('INVALID_TOKEN');
    return error as InvalidTokenError;
  }
  throw new Error(`parseToken(${String(input)}) did not throw`);
}

const validToken = fc.bigInt({ min: 1n, max: MAX_TOKEN });

// Strings that look almost like tokens: where a lax parser (Number(),
// BigInt(), parseInt, /\d+/) would accept something the canonical form is not.
const nearTokens = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary' }),
  fc.stringMatching(/^[+-]?0*[0-9]{0,25}$/),
  fc.tuple(
    fc.constantFrom('', ' ', '\t', '\n', '+', '-', '0', '00', '0x', '\u00a0', '\ufeff', '\u200b', 'n'),
    validToken.map(String),
    fc.constantFrom('', ' ', '\n', 'n', 'e0', 'E1', '.0', '.', '_0', '0', '\u0000', '\r\n'),
  ).map(([prefix, digits, suffix]) => prefix + digits + suffix),
  validToken.map((t) => t.toString(16)),
  fc.bigInt({ min: MAX_TOKEN - 1000n, max: MAX_TOKEN * 20n }).map(String),
);

describe('parseToken / formatToken round trip', () => {
  it('formatToken then parseToken gives back every token in 1..2^63-1', () => {
    fc.assert(
      fc.property(validToken, (token) => {
        const text = formatToken(token);
        expect(text).toMatch(/^[1-9][0-9]*$/);
        expect(parseToken(text)).toBe(token);
      }),
      { numRuns: 2000 },
    );
  });

  it('parseToken then formatToken gives back every canonical string', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[1-9][0-9]{0,18}$/), (text) => {
        fc.pre(BigInt(text) <= MAX_TOKEN);
        expect(formatToken(parseToken(text))).toBe(text);
      }),
    );
  });

  it('handles the edges: 1, 2^53 and its neighbours, 2^63-1', () => {
    for (const token of [1n, 9n, 10n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 53n + 1n, 0x1_0000_0007n, 0x2_0000_0003n, MAX_TOKEN]) {
      expect(parseToken(formatToken(token))).toBe(token);
    }
    expect(formatToken(MAX_TOKEN)).toBe('9223372036854775807');
    expect(parseToken('9007199254740993')).toBe(9007199254740993n); // 2^53+1: a number would round it
    expect(MAX_TOKEN).toBe(TWO_63 - 1n);
  });
});

describe('parseToken rejects everything but the canonical decimal', () => {
  it('accepts exactly what the reference rule accepts, for arbitrary strings', () => {
    fc.assert(
      fc.property(nearTokens, (text) => {
        if (isCanonical(text)) expect(parseToken(text)).toBe(BigInt(text));
        else rejects(text);
      }),
      { numRuns: 5000 },
    );
  });

  it.each([
    ['empty', ''],
    ['space', ' '],
    ['leading space', ' 1'],
    ['trailing space', '1 '],
    ['trailing newline', '1\n'],
    ['tab', '\t1'],
    ['no-break space', '\u00a01'],
    ['BOM', '\ufeff1'],
    ['plus sign', '+1'],
    ['minus sign', '-1'],
    ['negative zero', '-0'],
    ['zero', '0'],
    ['zeros', '000'],
    ['leading zero', '01'],
    ['leading zeros on the max', '09223372036854775807'],
    ['exponent', '1e3'],
    ['capital exponent', '1E3'],
    ['decimal point', '1.0'],
    ['trailing dot', '1.'],
    ['hex', '0x10'],
    ['hex digits alone', 'ff'],
    ['binary', '0b1'],
    ['octal', '0o7'],
    ['numeric separator', '1_000'],
    ['bigint literal', '1n'],
    ['Infinity', 'Infinity'],
    ['NaN', 'NaN'],
    ['Arabic-Indic digits', '٣٤'],
    ['Arabic-Indic one', '١'],
    ['fullwidth digits', '１２'],
    ['Devanagari digits', '१२'],
    ['mixed ASCII and Arabic-Indic', '1٣'],
    ['superscript', '²'],
    ['NUL inside', '1\u00002'],
    ['2^63', '9223372036854775808'],
    ['2^64', '18446744073709551616'],
    ['20 digits', '10000000000000000000'],
    ['very long', '9'.repeat(100_000)],
    ['long string of ones', '1'.repeat(10_000)],
  ])('%s: %j', (_label, text) => {
    rejects(text);
  });

  it('does not echo huge input in its message', () => {
    const error = rejects('7'.repeat(1_000_000));
    expect(error.message.length).toBeLessThan(200);
  });

  it.each([
    ['a number', 1],
    ['NaN', Number.NaN],
    ['a bigint', 1n],
    ['null', null],
    ['undefined', undefined],
    ['a boolean', true],
    ['an object', {}],
    ['an array', ['1']],
    ['an object whose toString is a token', { toString: () => '5' }],
    ['a String object', new String('5')],
    ['a symbol', Symbol('1')],
  ])('rejects %s', (_label, value) => {
    rejects(value);
  });
});

describe('assertToken / formatToken guard their input', () => {
  it('assertToken returns every bigint in range unchanged', () => {
    fc.assert(
      fc.property(validToken, (token) => {
        expect(assertToken(token)).toBe(token);
      }),
    );
  });

  it('rejects every bigint out of range', () => {
    const outOfRange = fc.oneof(fc.bigInt({ max: 0n }), fc.bigInt({ min: TWO_63 }));
    fc.assert(
      fc.property(outOfRange, (value) => {
        expect(() => assertToken(value)).toThrow(InvalidTokenError);
        expect(() => formatToken(value)).toThrow(InvalidTokenError);
      }),
    );
    for (const value of [0n, -1n, TWO_63, 2n ** 64n]) expect(() => formatToken(value)).toThrow(InvalidTokenError);
  });

  it.each([
    ['a number', 5],
    ['an unsafe number', 2 ** 60],
    ['a string', '5'],
    ['null', null],
    ['undefined', undefined],
    ['an object', {}],
  ])('rejects %s', (_label, value) => {
    expect(() => assertToken(value)).toThrow(InvalidTokenError);
    expect(() => formatToken(value as bigint)).toThrow(InvalidTokenError);
  });
});
