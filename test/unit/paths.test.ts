import { describe, expect, it } from 'vitest';
import { codeOf } from '../helpers/fixtures.js';
import fc from 'fast-check';
import path from 'node:path';
import { HomesError, type HomesCode } from '../../src/errors.js';
import {
  checkComponent,
  checkSegment,
  classifyKey,
  decodeBackingName,
  keyFor,
  NAME_MAX_BYTES,
  TENANT_KEY,
  USER_KEY_PREFIX,
  type HomeScope,
} from '../../src/paths/names.js';
import { homeId, parseVirtualPath, splitLast } from '../../src/paths/parse.js';


const LONE_HIGH = '\ud800';
const LONE_LOW = '\udc00';
const e = 'é'; // 2 bytes in UTF-8
const euro = '€'; // 3 bytes
const emoji = '😀'; // 4 bytes, 2 UTF-16 code units

describe('checkComponent', () => {
  const cases: Array<[string, string, HomesCode | 'OK']> = [
    ['plain name', 'file.txt', 'OK'],
    ['dotfile', '.bashrc', 'OK'],
    ['three dots', '...', 'OK'],
    ['dot-dot prefix', '..foo', 'OK'],
    ['backslash is fine inside a home', 'a\\b', 'OK'],
    ['control char is fine inside a home', 'a\tb', 'OK'],
    ['unicode', 'naïve-日本-😀', 'OK'],
    ['empty', '', 'INVALID_NAME'],
    ['dot', '.', 'INVALID_NAME'],
    ['dot-dot', '..', 'INVALID_NAME'],
    ['slash alone', '/', 'INVALID_NAME'],
    ['embedded slash', 'a/b', 'INVALID_NAME'],
    ['traversal', '../etc', 'INVALID_NAME'],
    ['NUL alone', '\0', 'INVALID_NAME'],
    ['embedded NUL', 'a\0b', 'INVALID_NAME'],
    ['lone high surrogate', LONE_HIGH, 'NOT_UTF8_NAME'],
    ['lone low surrogate', `x${LONE_LOW}y`, 'NOT_UTF8_NAME'],
    ['reversed surrogate pair', `${LONE_LOW}${LONE_HIGH}`, 'NOT_UTF8_NAME'],
    ['255 ASCII bytes', 'a'.repeat(255), 'OK'],
    ['256 ASCII bytes', 'a'.repeat(256), 'NAME_TOO_LONG'],
    ['255 bytes of 2-byte chars + 1', e.repeat(127) + 'a', 'OK'],
    ['256 bytes of 2-byte chars', e.repeat(128), 'NAME_TOO_LONG'],
    ['255 bytes of 3-byte chars', euro.repeat(85), 'OK'],
    ['258 bytes of 3-byte chars (86 UTF-16 units)', euro.repeat(86), 'NAME_TOO_LONG'],
    ['252 bytes of emoji + 3', emoji.repeat(63) + 'abc', 'OK'],
    ['256 bytes of emoji (128 UTF-16 units)', emoji.repeat(64), 'NAME_TOO_LONG'],
  ];
  it.each(cases)('%s', (_label, name, expected) => {
    expect(codeOf(() => checkComponent(name))).toBe(expected);
  });

  it('NAME_MAX_BYTES is 255', () => {
    expect(NAME_MAX_BYTES).toBe(255);
  });

  it('counts bytes, not UTF-16 units, against a custom limit', () => {
    expect(codeOf(() => checkComponent(euro.repeat(3), 9))).toBe('OK');
    expect(codeOf(() => checkComponent(euro.repeat(3), 8))).toBe('NAME_TOO_LONG');
  });

  it('NAME_TOO_LONG carries the byte count and limit', () => {
    try {
      checkComponent(e.repeat(128));
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(HomesError);
      expect((err as HomesError).details).toEqual({ bytes: 256, limit: 255 });
      expect((err as HomesError).errno).toBeGreaterThan(0);
    }
  });

  it('property: a well-formed name without / or NUL, not . or .., within 255 bytes passes', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }), (s) => {
        const valid =
          s !== '.' && s !== '..' && !s.includes('/') && !s.includes('\0') && Buffer.byteLength(s) <= 255;
        expect(codeOf(() => checkComponent(s)) === 'OK').toBe(valid);
      }),
      { numRuns: 300 },
    );
  });
});

describe('decodeBackingName', () => {
  const cases: Array<[string, Buffer, string | null]> = [
    ['ascii', Buffer.from('hello'), 'hello'],
    ['utf-8 multibyte', Buffer.from('日本😀'), '日本😀'],
    ['invalid trailing 0xff', Buffer.from([0x66, 0xff]), null],
    ['stray continuation byte', Buffer.from([0x80]), null],
    ['truncated sequence', Buffer.from([0x66, 0xe2, 0x82]), null],
    ['overlong encoding of /', Buffer.from([0xc0, 0xaf]), null],
    ['encoded surrogate', Buffer.from([0xed, 0xa0, 0x80]), null],
    ['above U+10FFFF', Buffer.from([0xf4, 0x90, 0x80, 0x80]), null],
    ['empty', Buffer.alloc(0), null],
    ['dot', Buffer.from('.'), null],
    ['dot-dot', Buffer.from('..'), null],
    ['NUL', Buffer.from([0x61, 0x00, 0x62]), null],
    ['slash', Buffer.from('a/b'), null],
    ['255 bytes', Buffer.alloc(255, 0x61), 'a'.repeat(255)],
    ['256 bytes', Buffer.alloc(256, 0x61), null],
  ];
  it.each(cases)('%s', (_label, raw, expected) => {
    expect(decodeBackingName(raw)).toBe(expected);
  });

  it('property: agrees with fatal UTF-8 decoding + checkComponent', () => {
    const fatal = new TextDecoder('utf-8', { fatal: true });
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 12 }), (bytes) => {
        const raw = Buffer.from(bytes);
        let expected: string | null;
        try {
          const s = fatal.decode(raw);
          checkComponent(s);
          expected = s;
        } catch {
          expected = null;
        }
        expect(decodeBackingName(raw)).toBe(expected);
      }),
      { numRuns: 300 },
    );
  });
});

describe('checkSegment', () => {
  const kinds = ['tenant', 'project', 'login', 'key'] as const;
  const common: Array<[string, string, HomesCode | 'OK']> = [
    ['plain', 'acme', 'OK'],
    ['dashes/underscores/digits', 'a-b_c9', 'OK'],
    ['unicode', 'équipe', 'OK'],
    ['inner dot', 'a.b', 'OK'],
    ['empty', '', 'INVALID_NAME'],
    ['dot', '.', 'INVALID_NAME'],
    ['dot-dot', '..', 'INVALID_NAME'],
    ['slash', 'a/b', 'INVALID_NAME'],
    ['NUL', 'a\0b', 'INVALID_NAME'],
    ['lone surrogate', `a${LONE_HIGH}`, 'NOT_UTF8_NAME'],
    ['backslash', 'a\\b', 'INVALID_NAME'],
    ['leading backslash', '\\', 'INVALID_NAME'],
    ['tab', 'a\tb', 'INVALID_NAME'],
    ['newline', 'a\nb', 'INVALID_NAME'],
    ['0x01', '\u0001', 'INVALID_NAME'],
    ['0x1f', 'x\u001f', 'INVALID_NAME'],
    ['DEL', 'x\u007f', 'INVALID_NAME'],
    ['leading dot', '.hidden', 'INVALID_NAME'],
    ['daemon-internal name', '.homesfs-selfcheck', 'INVALID_NAME'],
    ['128 bytes', 'a'.repeat(128), 'OK'],
    ['128 bytes multibyte', e.repeat(64), 'OK'],
  ];
  for (const kind of kinds) {
    it.each(common)(`${kind}: %s`, (_label, value, expected) => {
      expect(codeOf(() => checkSegment(kind, value))).toBe(expected);
    });
  }

  const lengths: Array<[(typeof kinds)[number], string, HomesCode | 'OK']> = [
    ['tenant', 'a'.repeat(129), 'NAME_TOO_LONG'],
    ['project', 'a'.repeat(129), 'NAME_TOO_LONG'],
    ['login', 'a'.repeat(129), 'NAME_TOO_LONG'],
    ['login', e.repeat(64) + 'a', 'NAME_TOO_LONG'],
    ['key', 'a'.repeat(134), 'OK'],
    ['key', 'a'.repeat(135), 'NAME_TOO_LONG'],
    ['key', 'a'.repeat(137), 'NAME_TOO_LONG'],
    ['tenant', 'a'.repeat(300), 'NAME_TOO_LONG'],
  ];
  it.each(lengths)('%s #%#: %s', (kind, value, expected) => {
    expect(codeOf(() => checkSegment(kind, value))).toBe(expected);
  });
});

describe('classifyKey', () => {
  const ok: Array<[string, HomeScope, string | null]> = [
    ['_tenant', 'tenant', null],
    ['_user_alice', 'user', 'alice'],
    ['_user_a.b', 'user', 'a.b'],
    ['_user__x', 'user', '_x'],
    ['_user_' + 'a'.repeat(128), 'user', 'a'.repeat(128)],
    ['proj', 'project', 'proj'],
    ['web-app_2', 'project', 'web-app_2'],
    ['tenant', 'project', 'tenant'],
    ['user_alice', 'project', 'user_alice'],
  ];
  it.each(ok)('%s → %s', (key, scope, subject) => {
    expect(classifyKey(key)).toEqual({ scope, subject });
  });

  const bad: Array<[string, HomesCode]> = [
    ['_user_', 'INVALID_NAME'], // empty login
    ['_user_.alice', 'INVALID_NAME'], // login with leading dot
    ['_other', 'INVALID_NAME'],
    ['_', 'INVALID_NAME'],
    ['_tenant2', 'INVALID_NAME'],
    ['_Tenant', 'INVALID_NAME'],
    ['_user', 'INVALID_NAME'],
    ['', 'INVALID_NAME'],
    ['.', 'INVALID_NAME'],
    ['..', 'INVALID_NAME'],
    ['.proj', 'INVALID_NAME'],
    ['a\\b', 'INVALID_NAME'],
    ['a\nb', 'INVALID_NAME'],
    ['a/b', 'INVALID_NAME'],
    ['a\0', 'INVALID_NAME'],
    [LONE_LOW, 'NOT_UTF8_NAME'],
    ['a'.repeat(135), 'NAME_TOO_LONG'],
    ['_user_' + 'a'.repeat(129), 'NAME_TOO_LONG'],
  ];
  it.each(bad)('refuses %j with %s', (key, code) => {
    expect(codeOf(() => classifyKey(key))).toBe(code);
  });
});

describe('keyFor', () => {
  const ok: Array<[HomeScope, string | null, string]> = [
    ['tenant', null, TENANT_KEY],
    ['tenant', 'ignored', '_tenant'],
    ['user', 'alice', '_user_alice'],
    ['user', '_x', '_user__x'],
    ['project', 'proj', 'proj'],
    ['project', 'a'.repeat(128), 'a'.repeat(128)],
  ];
  it.each(ok)('%s/%s → %s', (scope, subject, key) => {
    expect(keyFor(scope, subject)).toBe(key);
  });

  const bad: Array<[HomeScope, string | null, HomesCode]> = [
    ['user', null, 'INVALID_ARGUMENT'],
    ['project', null, 'INVALID_ARGUMENT'],
    ['user', '', 'INVALID_NAME'],
    ['user', '.alice', 'INVALID_NAME'],
    ['user', 'a/b', 'INVALID_NAME'],
    ['user', 'a'.repeat(129), 'NAME_TOO_LONG'],
    ['project', '', 'INVALID_NAME'],
    ['project', '_tenant', 'INVALID_NAME'],
    ['project', '_user_alice', 'INVALID_NAME'],
    ['project', '_x', 'INVALID_NAME'],
    ['project', '..', 'INVALID_NAME'],
    ['project', 'a\\b', 'INVALID_NAME'],
    ['project', `p${LONE_HIGH}`, 'NOT_UTF8_NAME'],
    ['project', 'a'.repeat(129), 'NAME_TOO_LONG'],
  ];
  it.each(bad)('%s/%j refused with %s', (scope, subject, code) => {
    expect(codeOf(() => keyFor(scope, subject))).toBe(code);
  });

  it('USER_KEY_PREFIX is _user_', () => {
    expect(USER_KEY_PREFIX).toBe('_user_');
  });

  it('property: classifyKey(keyFor(scope, subject)) round-trips', () => {
    const subject = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 });
    fc.assert(
      fc.property(fc.constantFrom<HomeScope>('tenant', 'user', 'project'), subject, (scope, s) => {
        let key: string;
        try {
          key = keyFor(scope, s);
        } catch (err) {
          expect(err).toBeInstanceOf(HomesError);
          return;
        }
        const info = classifyKey(key);
        expect(info.scope).toBe(scope);
        expect(info.subject).toBe(scope === 'tenant' ? null : s);
      }),
      { numRuns: 300 },
    );
  });
});

describe('parseVirtualPath', () => {
  const ok: Array<[string, ReturnType<typeof parseVirtualPath>]> = [
    ['/', { kind: 'root' }],
    ['/acme', { kind: 'tenant', tenant: 'acme' }],
    ['/acme/_tenant', { kind: 'home', home: { tenant: 'acme', key: '_tenant' }, rel: [] }],
    ['/acme/_user_alice', { kind: 'home', home: { tenant: 'acme', key: '_user_alice' }, rel: [] }],
    ['/acme/proj/a/b.txt', { kind: 'home', home: { tenant: 'acme', key: 'proj' }, rel: ['a', 'b.txt'] }],
    ['/acme/proj/.cache/x\\y', { kind: 'home', home: { tenant: 'acme', key: 'proj' }, rel: ['.cache', 'x\\y'] }],
    ['/acme/proj/' + 'a'.repeat(255), { kind: 'home', home: { tenant: 'acme', key: 'proj' }, rel: ['a'.repeat(255)] }],
  ];
  it.each(ok)('%s', (p, expected) => {
    expect(parseVirtualPath(p)).toEqual(expected);
  });

  const bad: Array<[string, HomesCode]> = [
    ['', 'INVALID_NAME'],
    ['acme', 'INVALID_NAME'],
    ['acme/proj', 'INVALID_NAME'],
    ['//', 'INVALID_NAME'],
    ['/acme/', 'INVALID_NAME'],
    ['/acme/proj/', 'INVALID_NAME'],
    ['/acme//x', 'INVALID_NAME'],
    ['/acme/proj//x', 'INVALID_NAME'],
    ['/.', 'INVALID_NAME'],
    ['/..', 'INVALID_NAME'],
    ['/.acme', 'INVALID_NAME'],
    ['/acme/..', 'INVALID_NAME'],
    ['/acme/.', 'INVALID_NAME'],
    ['/acme/proj/..', 'INVALID_NAME'],
    ['/acme/proj/a/../../../etc', 'INVALID_NAME'],
    ['/acme/proj/./x', 'INVALID_NAME'],
    ['/ac\\me', 'INVALID_NAME'],
    ['/ac\nme', 'INVALID_NAME'],
    ['/acme/pr\u0001oj', 'INVALID_NAME'],
    ['/acme/_other', 'INVALID_NAME'],
    ['/acme/_user_', 'INVALID_NAME'],
    ['/acme/proj/a\0b', 'INVALID_NAME'],
    ['/a\0', 'INVALID_NAME'],
    [`/acme/proj/${LONE_HIGH}`, 'NOT_UTF8_NAME'],
    [`/acme${LONE_LOW}`, 'NOT_UTF8_NAME'],
    ['/acme/proj/' + 'a'.repeat(256), 'NAME_TOO_LONG'],
    ['/acme/proj/' + e.repeat(128), 'NAME_TOO_LONG'],
    ['/' + 'a'.repeat(129), 'NAME_TOO_LONG'],
    ['/acme/' + 'a'.repeat(135), 'NAME_TOO_LONG'],
    // a working directory left inside a deleted home (libfuse kept its trash name)
    ['/acme/.homesfs-trash-0a1b2c3d4e5f/x', 'NOT_FOUND'],
    ['/acme/.homesfs-trash-0a1b2c3d4e5f', 'NOT_FOUND'],
  ];
  it.each(bad)('refuses %j with %s', (p, code) => {
    expect(codeOf(() => parseVirtualPath(p))).toBe(code);
  });

  it('property: either a HomesError or a route that cannot escape its home', () => {
    const segment = fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom('..', '.', '', '/', '\0', 'a\0b', '\\', '.hidden', '_tenant', '_user_bob', '_user_', '_other', 'proj', 'acme', '..%2f', '\u2024\u2024', '\uff0e\uff0e', LONE_HIGH, emoji) },
      { weight: 3, arbitrary: fc.string({ unit: 'grapheme', maxLength: 8 }) },
      { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom('.', '/', '\0', '\\', 'a', '_', 'é', '\n'), maxLength: 6 }) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 6 }) },
      { weight: 1, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 250, maxLength: 260 }) },
    );
    const input = fc.oneof(
      { weight: 4, arbitrary: fc.array(segment, { maxLength: 6 }).map((segs) => '/' + segs.join('/')) },
      { weight: 1, arbitrary: fc.array(segment, { maxLength: 6 }).map((segs) => segs.join('/')) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
    );
    let homes = 0;
    fc.assert(
      fc.property(input, (p) => {
        let route: ReturnType<typeof parseVirtualPath>;
        try {
          route = parseVirtualPath(p);
        } catch (err) {
          expect(err).toBeInstanceOf(HomesError);
          return;
        }
        const safe = (c: string) => {
          expect(() => checkComponent(c)).not.toThrow();
          expect(c).not.toBe('.');
          expect(c).not.toBe('..');
          expect(c).not.toContain('/');
          expect(c).not.toContain('\0');
        };
        if (route.kind === 'root') {
          expect(p).toBe('/');
          return;
        }
        if (route.kind === 'tenant') {
          safe(route.tenant);
          expect(p).toBe('/' + route.tenant);
          return;
        }
        homes++;
        const { tenant, key } = route.home;
        safe(tenant);
        safe(key);
        expect(() => checkSegment('tenant', tenant)).not.toThrow();
        expect(() => classifyKey(key)).not.toThrow();
        route.rel.forEach(safe);
        const joined = path.posix.join('/backing', tenant, key, ...route.rel);
        const base = `/backing/${tenant}/${key}`;
        expect(joined === base || joined.startsWith(base + '/')).toBe(true);
        expect(path.posix.normalize(joined)).toBe(joined);
        expect(joined).toBe([base, ...route.rel].join('/'));
        expect(p).toBe(['', tenant, key, ...route.rel].join('/'));
      }),
      { numRuns: 500 },
    );
    // Sanity: the generator does reach the home branch sometimes.
    expect(homes).toBeGreaterThan(0);
  });
});

describe('splitLast and homeId', () => {
  const cases: Array<[string[], { dir: string[]; name: string } | null]> = [
    [[], null],
    [['a'], { dir: [], name: 'a' }],
    [['a', 'b'], { dir: ['a'], name: 'b' }],
    [['a', 'b', 'c'], { dir: ['a', 'b'], name: 'c' }],
  ];
  it.each(cases)('splitLast(%j)', (rel, expected) => {
    expect(splitLast(rel)).toEqual(expected);
  });

  it('splitLast does not mutate its input', () => {
    const rel = Object.freeze(['x', 'y', 'z']);
    const r = splitLast(rel);
    expect(r).toEqual({ dir: ['x', 'y'], name: 'z' });
    expect(rel).toEqual(['x', 'y', 'z']);
  });

  it('property: dir + [name] reassembles rel', () => {
    fc.assert(
      fc.property(fc.array(fc.string(), { minLength: 1, maxLength: 8 }), (rel) => {
        const r = splitLast(rel)!;
        expect([...r.dir, r.name]).toEqual(rel);
      }),
    );
  });

  it.each([
    [{ tenant: 'acme', key: '_tenant' }, 'acme/_tenant'],
    [{ tenant: 'acme', key: '_user_alice' }, 'acme/_user_alice'],
    [{ tenant: 't', key: 'proj' }, 't/proj'],
  ])('homeId(%j) = %s', (home, id) => {
    expect(homeId(home)).toBe(id);
  });

  it('homeId of a parsed home path is the path without its leading slash', () => {
    const r = parseVirtualPath('/acme/proj');
    expect(r.kind).toBe('home');
    if (r.kind === 'home') expect(homeId(r.home)).toBe('acme/proj');
  });
});
