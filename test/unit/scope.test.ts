import { describe, expect, it } from 'vitest';
import { codeOf } from '../helpers/fixtures.js';
import fc from 'fast-check';
import { HomesError, type HomesCode } from '../../src/errors.js';
import { allocateOwner, OVERFLOW_ID } from '../../src/scope/owners.js';
import { isOrphan, parseHomeScope, resolveScope, type ScopeSettings } from '../../src/scope/resolve.js';


const S = (s: Partial<ScopeSettings>): ScopeSettings => ({ projects: {}, users: {}, ...s });

describe('resolveScope: the cascade user → project → tenant → project', () => {
  type Row = [string, ScopeSettings | undefined, string | undefined, { scope: string; source: string; key: string; fallback?: true }];
  const rows: Row[] = [
    ['no settings at all', undefined, 'alice', { scope: 'project', source: 'default', key: 'web' }],
    ['empty settings', S({}), 'alice', { scope: 'project', source: 'default', key: 'web' }],
    ['tenant default tenant', S({ tenantDefault: 'tenant' }), 'alice', { scope: 'tenant', source: 'tenant', key: '_tenant' }],
    ['tenant default user', S({ tenantDefault: 'user' }), 'alice', { scope: 'user', source: 'tenant', key: '_user_alice' }],
    ['tenant default project', S({ tenantDefault: 'project' }), 'alice', { scope: 'project', source: 'tenant', key: 'web' }],
    ['project beats tenant', S({ tenantDefault: 'tenant', projects: { web: 'project' } }), 'alice', { scope: 'project', source: 'project', key: 'web' }],
    ['project exception widens', S({ tenantDefault: 'project', projects: { web: 'tenant' } }), 'alice', { scope: 'tenant', source: 'project', key: '_tenant' }],
    ['other project does not count', S({ projects: { api: 'tenant' } }), 'alice', { scope: 'project', source: 'default', key: 'web' }],
    ['user beats project', S({ projects: { web: 'tenant' }, users: { alice: 'user' } }), 'alice', { scope: 'user', source: 'user', key: '_user_alice' }],
    ['user setting project', S({ tenantDefault: 'tenant', users: { alice: 'project' } }), 'alice', { scope: 'project', source: 'user', key: 'web' }],
    ['other user does not count', S({ users: { bob: 'user' } }), 'alice', { scope: 'project', source: 'default', key: 'web' }],
    ['user setting ignored without user', S({ users: { alice: 'tenant' } }), undefined, { scope: 'project', source: 'default', key: 'web' }],
    ['user scope without user: project home', S({ projects: { web: 'user' } }), undefined, { scope: 'project', source: 'project', key: 'web', fallback: true }],
    ['tenant user default without user', S({ tenantDefault: 'user' }), undefined, { scope: 'project', source: 'tenant', key: 'web', fallback: true }],
  ];
  it.each(rows)('%s', (_name, settings, user, want) => {
    const got = resolveScope(settings, { tenant: 'acme', project: 'web', ...(user !== undefined ? { user } : {}) });
    expect(got).toEqual(want);
    expect(got.warning).toBeUndefined();
  });
});

describe('resolveScope: unparseable values mean project, with a warning', () => {
  const garbage = ['', 'Tenant', 'TENANT', ' tenant', 'tenant ', 'tenants', 'shared', 'null', '_tenant', '_user_alice', '../x', 'user\n', 'tenant\u0000'];
  it.each(garbage)('%j at every level', (bad) => {
    for (const [settings, source] of [
      [S({ tenantDefault: bad }), 'tenant'],
      [S({ tenantDefault: 'tenant', projects: { web: bad } }), 'project'],
      [S({ tenantDefault: 'tenant', projects: { web: 'tenant' }, users: { alice: bad } }), 'user'],
    ] as const) {
      const got = resolveScope(settings, { tenant: 'acme', project: 'web', user: 'alice' });
      expect(got.scope).toBe('project');
      expect(got.key).toBe('web');
      expect(got.source).toBe(source);
      expect(got.warning).toMatch(/not one of project\|tenant\|user/);
    }
  });

  it('garbage never falls through to a wider level below it', () => {
    const got = resolveScope(S({ tenantDefault: 'tenant', projects: { web: 'tenantt' } }), { tenant: 'acme', project: 'web' });
    expect(got).toMatchObject({ scope: 'project', source: 'project', key: 'web' });
  });

  it('non-string values from a hand-edited file are garbage too', () => {
    const settings = { tenantDefault: 42, projects: { web: null }, users: { alice: ['user'] } } as unknown as ScopeSettings;
    expect(resolveScope(settings, { tenant: 'acme', project: 'web', user: 'alice' })).toMatchObject({ scope: 'project', source: 'user' });
    expect(resolveScope(settings, { tenant: 'acme', project: 'web' })).toMatchObject({ scope: 'project', source: 'project' });
    expect(resolveScope(settings, { tenant: 'acme', project: 'api' })).toMatchObject({ scope: 'project', source: 'tenant' });
  });

  it('the warning is bounded and escapes control characters', () => {
    const bad = `x\u001b[31m${'y'.repeat(5000)}`;
    const got = resolveScope(S({ projects: { web: bad } }), { tenant: 'acme', project: 'web' });
    expect(got.warning!.length).toBeLessThan(300);
    expect(got.warning).not.toContain('\u001b');
    expect(got.warning).toContain('\\u001b');
  });

  it('inherited properties are not settings', () => {
    for (const project of ['constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
      expect(resolveScope(S({}), { tenant: 'acme', project, user: 'constructor' })).toEqual({ scope: 'project', source: 'default', key: project });
    }
    const withProtoKey = S({ projects: JSON.parse('{"__proto__":"tenant"}') as Record<string, string> });
    // "__proto__" is an own key here; the project name itself is refused (leading "_").
    expect(codeOf(() => resolveScope(withProtoKey, { tenant: 'acme', project: '__proto__' }))).toBe('INVALID_NAME');
  });
});

describe('resolveScope: names are validated first', () => {
  const cases: Array<[string, { tenant: string; project: string; user?: string }, HomesCode]> = [
    ['project _user_alice', { tenant: 'acme', project: '_user_alice' }, 'INVALID_NAME'],
    ['project _tenant', { tenant: 'acme', project: '_tenant' }, 'INVALID_NAME'],
    ['project _x', { tenant: 'acme', project: '_x' }, 'INVALID_NAME'],
    ['project ..', { tenant: 'acme', project: '..' }, 'INVALID_NAME'],
    ['project with slash', { tenant: 'acme', project: 'a/b' }, 'INVALID_NAME'],
    ['project with backslash', { tenant: 'acme', project: 'a\\b' }, 'INVALID_NAME'],
    ['empty project', { tenant: 'acme', project: '' }, 'INVALID_NAME'],
    ['tenant .', { tenant: '.', project: 'web' }, 'INVALID_NAME'],
    ['tenant with NUL', { tenant: 'ac\0me', project: 'web' }, 'INVALID_NAME'],
    ['long tenant', { tenant: 'a'.repeat(129), project: 'web' }, 'NAME_TOO_LONG'],
    ['lone surrogate project', { tenant: 'acme', project: 'w\ud800' }, 'NOT_UTF8_NAME'],
    ['login with slash', { tenant: 'acme', project: 'web', user: '../bob' }, 'INVALID_NAME'],
    ['empty login', { tenant: 'acme', project: 'web', user: '' }, 'INVALID_NAME'],
  ];
  it.each(cases)('%s', (_name, req, code) => {
    expect(codeOf(() => resolveScope(S({ tenantDefault: 'tenant' }), req))).toBe(code);
    expect(codeOf(() => resolveScope(undefined, req))).toBe(code);
  });

  it('a login is validated even when the scope never uses it', () => {
    expect(codeOf(() => resolveScope(S({ tenantDefault: 'tenant' }), { tenant: 'acme', project: 'web', user: 'a\0b' }))).toBe('INVALID_NAME');
  });
});

describe('resolveScope: property', () => {
  const name = fc.stringMatching(/^[a-z][a-z0-9-]{0,15}$/);
  const anyText = fc.oneof(fc.string(), fc.constantFrom('project', 'tenant', 'user', 'Tenant', '_tenant', '_user_x', '..', '/'));
  const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });

  it('the key is always <project>, _tenant or _user_<login>, and garbage never widens', () => {
    fc.assert(
      fc.property(
        name,
        name,
        maybe(name),
        maybe(anyText),
        maybe(anyText),
        maybe(anyText),
        (project, tenant, user, tenantDefault, projectValue, userValue) => {
          const settings: ScopeSettings = {
            ...(tenantDefault !== undefined ? { tenantDefault } : {}),
            projects: projectValue !== undefined ? { [project]: projectValue } : {},
            users: user !== undefined && userValue !== undefined ? { [user]: userValue } : {},
          };
          const got = resolveScope(settings, { tenant, project, ...(user !== undefined ? { user } : {}) });
          const allowed = [project, '_tenant', ...(user !== undefined ? [`_user_${user}`] : [])];
          expect(allowed).toContain(got.key);
          expect(got.key).toBe(got.scope === 'project' ? project : got.scope === 'tenant' ? '_tenant' : `_user_${user}`);
          const decisive = [user !== undefined ? userValue : undefined, projectValue, tenantDefault].find((v) => v !== undefined);
          if (decisive === undefined || !['project', 'tenant', 'user'].includes(decisive)) {
            expect(got.scope).toBe('project');
          }
          expect(got.warning !== undefined).toBe(decisive !== undefined && !['project', 'tenant', 'user'].includes(decisive));
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('isOrphan', () => {
  it('a project home whose project now resolves to a shared scope', () => {
    expect(isOrphan(S({ tenantDefault: 'tenant' }), 'acme', 'web')).toBe(true);
    expect(isOrphan(S({ projects: { web: 'tenant' } }), 'acme', 'web')).toBe(true);
    expect(isOrphan(S({ tenantDefault: 'tenant', projects: { web: 'project' } }), 'acme', 'web')).toBe(false);
  });
  it('not an orphan', () => {
    expect(isOrphan(undefined, 'acme', 'web')).toBe(false);
    expect(isOrphan(S({}), 'acme', 'web')).toBe(false);
    // garbage means project: the home is in use
    expect(isOrphan(S({ tenantDefault: 'tennant' }), 'acme', 'web')).toBe(false);
    // user without a user still falls back to the project home
    expect(isOrphan(S({ projects: { web: 'user' } }), 'acme', 'web')).toBe(false);
    // user settings do not count: resolution is without a user
    expect(isOrphan(S({ users: { web: 'tenant' } }), 'acme', 'web')).toBe(false);
    // shared homes are never orphans
    expect(isOrphan(S({ tenantDefault: 'project' }), 'acme', '_tenant')).toBe(false);
    expect(isOrphan(S({ tenantDefault: 'project' }), 'acme', '_user_alice')).toBe(false);
  });
  it('refuses invalid names', () => {
    expect(codeOf(() => isOrphan(S({}), 'acme', '_weird'))).toBe('INVALID_NAME');
    expect(codeOf(() => isOrphan(S({}), '..', 'web'))).toBe('INVALID_NAME');
  });
});

describe('parseHomeScope', () => {
  it('accepts exactly the enum', () => {
    expect(parseHomeScope('project')).toBe('project');
    expect(parseHomeScope('tenant')).toBe('tenant');
    expect(parseHomeScope('user')).toBe('user');
    for (const bad of ['Project', '', ' user', null, 3, undefined]) expect(codeOf(() => parseHomeScope(bad))).toBe('INVALID_ARGUMENT');
  });
});

describe('allocateOwner', () => {
  const range = { from: 20000, to: 20009 };
  it('the lowest free uid, gid = uid', () => {
    expect(allocateOwner(range, [])).toEqual({ uid: 20000, gid: 20000 });
    expect(allocateOwner(range, [20000, 20001, 20003])).toEqual({ uid: 20002, gid: 20002 });
    expect(allocateOwner(range, new Set([20000]))).toEqual({ uid: 20001, gid: 20001 });
    // ids outside the range do not matter
    expect(allocateOwner(range, [0, 1000, 19999, 20010])).toEqual({ uid: 20000, gid: 20000 });
    // duplicates in `used` are fine
    expect(allocateOwner(range, [20000, 20000, 20001])).toEqual({ uid: 20002, gid: 20002 });
  });
  it('with a high-water mark it only moves forward: a freed id below the mark is never handed out again', () => {
    expect(allocateOwner(range, [20000, 20003], 20003)).toEqual({ uid: 20004, gid: 20004 });
    expect(allocateOwner(range, [], 20005)).toEqual({ uid: 20006, gid: 20006 });
    // a mark below the range (the range was moved up) starts at the range
    expect(allocateOwner(range, [], 100)).toEqual({ uid: 20000, gid: 20000 });
    const err = (() => {
      try {
        allocateOwner(range, [], 20009);
      } catch (e) {
        return e as { code: string; details: Record<string, unknown> };
      }
      return null;
    })();
    expect(err?.code).toBe('INVALID_ARGUMENT');
    expect(err?.details.reason).toBe('owner-range-exhausted');
  });
  it('a gid taken by an explicit owner is not handed out as a uid', () => {
    // home A: uid 20000 gid 20001 (set explicitly) → caller passes both
    expect(allocateOwner(range, [20000, 20001])).toEqual({ uid: 20002, gid: 20002 });
  });
  it('single-id range', () => {
    expect(allocateOwner({ from: 30000, to: 30000 }, [])).toEqual({ uid: 30000, gid: 30000 });
    expect(codeOf(() => allocateOwner({ from: 30000, to: 30000 }, [30000]))).toBe('INVALID_ARGUMENT');
  });
  it('exhausted: a clear error', () => {
    const used = Array.from({ length: 10 }, (_, i) => 20000 + i);
    try {
      allocateOwner(range, used);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(HomesError);
      expect((err as HomesError).code).toBe('INVALID_ARGUMENT');
      expect((err as HomesError).details).toMatchObject({ reason: 'owner-range-exhausted', from: 20000, to: 20009, inUse: 10 });
      expect((err as HomesError).message).toMatch(/no free owner uid/);
    }
  });
  it('skips the overflow id 65534', () => {
    expect(allocateOwner({ from: OVERFLOW_ID, to: OVERFLOW_ID + 1 }, [])).toEqual({ uid: 65535, gid: 65535 });
    expect(codeOf(() => allocateOwner({ from: OVERFLOW_ID, to: OVERFLOW_ID }, []))).toBe('INVALID_ARGUMENT');
  });
  it('bad ranges, never root', () => {
    for (const r of [
      { from: 0, to: 10 },
      { from: -5, to: 10 },
      { from: 10, to: 9 },
      { from: 1.5, to: 10 },
      { from: Number.NaN, to: 10 },
      { from: 1, to: 0xffffffff },
    ]) {
      expect(codeOf(() => allocateOwner(r, []))).toBe('INVALID_ARGUMENT');
    }
  });
  it('a huge range with many used ids stays fast', () => {
    const used = Array.from({ length: 100_000 }, (_, i) => 100_000 + i);
    expect(allocateOwner({ from: 100_000, to: 0xfffffffe }, used)).toEqual({ uid: 200_000, gid: 200_000 });
  });
  it('property: the result is in range, unused, the lowest such', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 70000 }), fc.integer({ min: 0, max: 40 }), fc.array(fc.integer({ min: 0, max: 70100 })), (from, width, used) => {
        const to = from + width;
        const taken = new Set(used);
        const free = [];
        for (let id = from; id <= to; id++) if (!taken.has(id) && id !== OVERFLOW_ID) free.push(id);
        if (free.length === 0) {
          expect(codeOf(() => allocateOwner({ from, to }, used))).toBe('INVALID_ARGUMENT');
        } else {
          expect(allocateOwner({ from, to }, used)).toEqual({ uid: free[0], gid: free[0] });
        }
      }),
    );
  });
});
