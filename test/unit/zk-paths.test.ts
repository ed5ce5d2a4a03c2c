import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { InvalidArgumentError } from '../../src/errors.js';
import { joinPath, parseConnectString, validatePath } from '../../src/sources/zookeeper/paths.js';

describe('validatePath', () => {
  it.each([
    ['relative', 'a/b'],
    ['empty', ''],
    ['trailing slash', '/a/'],
    ['empty segment', '/a//b'],
    ['leading double slash', '//a'],
    ["'.' segment", '/a/./b'],
    ["'..' segment", '/a/..'],
    ["'.' at the end", '/.'],
    ['NUL', '/a\u0000b'],
    ['control character', '/a\u0001'],
    ['unit separator', '/a\u001f'],
    ['DEL', '/a\u007f'],
    ['C1 control', '/a\u009f'],
    ['lone high surrogate', '/a\ud800'],
    ['private use', '/a\ue000'],
    ['last private use', '/a\uf8ff'],
    ['specials', '/a\ufff0'],
    ['noncharacter', '/a\uffff'],
  ])('rejects %s', (_what, path) => {
    expect(() => validatePath(path)).toThrow(InvalidArgumentError);
  });

  it.each(['/', '/a', '/a/b/c', '/a.b', '/..a', '/a..', '/.hidden', '/é', '/日本/語', '/a b', '/\u00a0', '/\uf900', '/\uffef', '/a-b_c:d'])(
    'accepts %j',
    (path) => {
      expect(() => validatePath(path)).not.toThrow();
    },
  );

  it('a sequential create may end with a slash (the server appends the counter)', () => {
    expect(() => validatePath('/a/', true)).not.toThrow();
    expect(() => validatePath('/a/', false)).toThrow(InvalidArgumentError);
    expect(() => validatePath('/a//', true)).toThrow(InvalidArgumentError);
  });

  it('accepts any absolute path of valid BMP characters (property)', () => {
    const segmentChar = fc.integer({ min: 0x20, max: 0xffef }).filter(
      (c) => c !== 0x2f && !(c >= 0x7f && c <= 0x9f) && !(c >= 0xd800 && c <= 0xf8ff),
    );
    const segment = fc
      .array(segmentChar, { minLength: 1, maxLength: 8 })
      .map((cs) => String.fromCharCode(...cs))
      .filter((s) => s !== '.' && s !== '..');
    fc.assert(
      fc.property(fc.array(segment, { minLength: 1, maxLength: 5 }), (segments) => {
        validatePath(`/${segments.join('/')}`);
      }),
    );
  });
});

describe('parseConnectString', () => {
  it('several hosts with ports', () => {
    expect(parseConnectString('10.0.0.1:2181,10.0.0.2:2182,zk3:2183')).toEqual({
      servers: [
        { host: '10.0.0.1', port: 2181 },
        { host: '10.0.0.2', port: 2182 },
        { host: 'zk3', port: 2183 },
      ],
      chroot: '',
    });
  });

  it('default port 2181', () => {
    expect(parseConnectString('a,b:2182').servers).toEqual([
      { host: 'a', port: 2181 },
      { host: 'b', port: 2182 },
    ]);
  });

  it('IPv6 in brackets, with and without a port', () => {
    expect(parseConnectString('[::1]:2281,[fe80::1%lo]').servers).toEqual([
      { host: '::1', port: 2281 },
      { host: 'fe80::1%lo', port: 2181 },
    ]);
  });

  it('a chroot', () => {
    expect(parseConnectString('h1:1,h2:2/app/locks')).toEqual({
      servers: [
        { host: 'h1', port: 1 },
        { host: 'h2', port: 2 },
      ],
      chroot: '/app/locks',
    });
    expect(parseConnectString('[::1]:2181/x').chroot).toBe('/x');
    expect(parseConnectString('h/').chroot).toBe('');
  });

  it('tolerates spaces and empty entries', () => {
    expect(parseConnectString(' a:1 , ,b:2').servers).toEqual([
      { host: 'a', port: 1 },
      { host: 'b', port: 2 },
    ]);
  });

  it.each(['', '   ', ',', 'h:', 'h:0', 'h:65536', 'h:12ab', 'h:-1', '[::1', '::1', '::1:2181', ':2181', 'h:2181/a/', 'h:2181/a//b', '/chroot'])(
    'rejects %j',
    (text) => {
      expect(() => parseConnectString(text)).toThrow(InvalidArgumentError);
    },
  );
});

describe('joinPath', () => {
  it('joins under the root and under a node', () => {
    expect(joinPath('/', 'a')).toBe('/a');
    expect(joinPath('/a', 'b')).toBe('/a/b');
  });
});
