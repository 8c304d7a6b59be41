import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  BUILTIN_PROFILES,
  chmodDecision,
  ConfigProfileSchema,
  DEFAULT_PROFILE_NAME,
  effectiveDirMode,
  effectiveFileMode,
  maySpecial,
  ProfileNameSchema,
  ProfileSchema,
  resolveProfileName,
  symlinkTargetInsideHome,
  validateProfileNames,
  type Profile,
} from '../../src/policy/profiles.js';

const { home, scratch, posix } = BUILTIN_PROFILES;
const withProfile = (base: Profile, patch: Partial<Profile>): Profile => ({ ...base, ...patch });

describe('built-in profiles', () => {
  it.each([
    { name: 'home', field: 'maxHomeBytes', value: 2147483648 },
    { name: 'home', field: 'maxInodes', value: 1_000_000 },
    { name: 'home', field: 'maxFileBytes', value: 0 },
    { name: 'home', field: 'content', value: 'binary' },
    { name: 'home', field: 'fileMode', value: 0o600 },
    { name: 'home', field: 'dirMode', value: 0o700 },
    { name: 'home', field: 'allowUserExec', value: true },
    { name: 'home', field: 'chmod', value: 'owner' },
    { name: 'home', field: 'symlinks', value: 'inside-home' },
    { name: 'home', field: 'hardLinks', value: 'inside-home' },
    { name: 'scratch', field: 'symlinks', value: 'deny' },
    { name: 'scratch', field: 'hardLinks', value: 'deny' },
    { name: 'scratch', field: 'allowUserExec', value: false },
    { name: 'home', field: 'chown', value: 'owner-only' },
    { name: 'home', field: 'directIo', value: false },
    { name: 'home', field: 'maxNameBytes', value: 255 },
    { name: 'scratch', field: 'maxFileBytes', value: 262144 },
    { name: 'scratch', field: 'maxHomeBytes', value: 4194304 },
    { name: 'scratch', field: 'maxInodes', value: 4096 },
    { name: 'scratch', field: 'content', value: 'utf8' },
    { name: 'scratch', field: 'fileMode', value: 0o600 },
    { name: 'scratch', field: 'chmod', value: 'deny-widen' },
    { name: 'scratch', field: 'directIo', value: true },
    { name: 'scratch', field: 'maxDepth', value: 8 },
    { name: 'scratch', field: 'maxEntriesPerDir', value: 256 },
    { name: 'scratch', field: 'maxNameBytes', value: 128 },
    { name: 'home', field: 'maxOpenFiles', value: 4096 },
    { name: 'scratch', field: 'maxOpenFiles', value: 128 },
    { name: 'posix', field: 'maxOpenFiles', value: 16384 },
    { name: 'posix', field: 'maxHomeBytes', value: 0 },
    { name: 'posix', field: 'maxInodes', value: 0 },
    { name: 'posix', field: 'maxFileBytes', value: 0 },
    { name: 'posix', field: 'fileMode', value: 'asked' },
    { name: 'posix', field: 'dirMode', value: 'asked' },
    { name: 'posix', field: 'chmod', value: 'allow' },
    { name: 'posix', field: 'symlinks', value: 'any' },
    { name: 'posix', field: 'hardLinks', value: 'inside-home' },
    { name: 'posix', field: 'specialFiles', value: 'all' },
    { name: 'home', field: 'specialFiles', value: 'fifo-socket' },
    { name: 'scratch', field: 'specialFiles', value: 'none' },
    { name: 'posix', field: 'chown', value: 'allow' },
    { name: 'posix', field: 'specialBits', value: 'keep' },
  ] as const)('$name.$field = $value', ({ name, field, value }) => {
    expect(BUILTIN_PROFILES[name][field]).toBe(value);
  });

  it('home allows links into the read-only system trees; scratch allows none', () => {
    expect(home.symlinkSystemPrefixes).toEqual(['/usr/', '/bin/', '/lib/', '/lib64/', '/opt/', '/etc/alternatives/']);
    expect(home.homeAliases).toEqual([]);
    expect(scratch.symlinkSystemPrefixes).toEqual([]);
  });

  it('are valid, deep-frozen, and the default exists', () => {
    for (const p of Object.values(BUILTIN_PROFILES)) {
      expect(ProfileSchema.parse(p)).toEqual(p);
      expect(Object.isFrozen(p)).toBe(true);
    }
    expect(Object.isFrozen(BUILTIN_PROFILES)).toBe(true);
    expect(() => {
      (BUILTIN_PROFILES.home as { maxHomeBytes: number }).maxHomeBytes = 1;
    }).toThrow(TypeError);
    expect(Object.hasOwn(BUILTIN_PROFILES, DEFAULT_PROFILE_NAME)).toBe(true);
  });
});

describe('ProfileSchema', () => {
  it.each([
    { name: 'octal string mode', patch: { fileMode: '0640' }, field: 'fileMode', want: 0o640 },
    { name: '0o string mode', patch: { dirMode: '0o750' }, field: 'dirMode', want: 0o750 },
    { name: 'decimal number mode (384 = 0o600)', patch: { fileMode: 384 }, field: 'fileMode', want: 0o600 },
    { name: 'asked', patch: { fileMode: 'asked' }, field: 'fileMode', want: 'asked' },
  ])('accepts $name', ({ patch, field, want }) => {
    const p = ProfileSchema.parse({ ...home, ...patch });
    expect(p[field as keyof Profile]).toBe(want);
  });

  it.each([
    { name: 'decimal 600 meant as octal', patch: { fileMode: 600 }, path: 'fileMode' },
    { name: 'a forced file mode without u+w', patch: { fileMode: 0o400 }, path: 'fileMode' },
    { name: 'a forced dir mode without u+x', patch: { dirMode: 0o600 }, path: 'dirMode' },
    { name: 'a mode with a setuid bit', patch: { fileMode: '4755' }, path: 'fileMode' },
    { name: 'an unknown mode word', patch: { dirMode: 'forced' }, path: 'dirMode' },
    { name: 'negative budget', patch: { maxHomeBytes: -1 }, path: 'maxHomeBytes' },
    { name: 'fractional budget', patch: { maxFileBytes: 1.5 }, path: 'maxFileBytes' },
    { name: 'name cap above 255', patch: { maxNameBytes: 256 }, path: 'maxNameBytes' },
    { name: 'name cap 0', patch: { maxNameBytes: 0 }, path: 'maxNameBytes' },
    { name: 'unknown chmod policy', patch: { chmod: 'deny' }, path: 'chmod' },
    { name: 'unknown content', patch: { content: 'text' }, path: 'content' },
    { name: 'a misspelt key', patch: { maxHomebytes: 5 }, path: '' },
  ])('refuses $name', ({ patch, path }) => {
    const r = ProfileSchema.safeParse({ ...home, ...patch });
    expect(r.success).toBe(false);
    expect(r.error?.issues.map((i) => i.path.join('.'))).toContain(path);
  });

  it("specialBits is optional (absent means 'drop') and follows extends", () => {
    const { specialBits: _omit, ...rest } = posix;
    expect(effectiveDirMode(ProfileSchema.parse(rest), 0o1777)).toBe(0o777);
    expect(ConfigProfileSchema.parse({ extends: 'posix' }).specialBits).toBe('keep');
    expect(ConfigProfileSchema.parse({ extends: 'posix', specialBits: 'drop' }).specialBits).toBe('drop');
    expect(ConfigProfileSchema.parse({ extends: 'home' }).specialBits).toBeUndefined();
  });

  it('maxOpenFiles is optional in a full definition (the home value) and follows extends', () => {
    const { maxOpenFiles: _omit, ...rest } = BUILTIN_PROFILES.scratch;
    expect(ProfileSchema.parse(rest).maxOpenFiles).toBe(4096);
    expect(ConfigProfileSchema.parse({ extends: 'scratch' }).maxOpenFiles).toBe(128);
    expect(ConfigProfileSchema.parse({ extends: 'scratch', maxOpenFiles: 0 }).maxOpenFiles).toBe(0);
    expect(ConfigProfileSchema.safeParse({ extends: 'home', maxOpenFiles: -1 }).success).toBe(false);
    expect(ConfigProfileSchema.safeParse({ extends: 'home', maxOpenFiles: 1.5 }).success).toBe(false);
  });

  it('soft limits: optional (off) in a full definition, follow extends, at most their hard limits', () => {
    const { softHomeBytes: _a, softInodes: _b, ...rest } = home;
    expect(ProfileSchema.parse(rest)).toMatchObject({ softHomeBytes: 0, softInodes: 0 });
    expect(ConfigProfileSchema.parse({ extends: 'home', softHomeBytes: 1024 ** 3 })).toMatchObject({ softHomeBytes: 1024 ** 3, softInodes: 0 });
    // exactly the hard limit is allowed (warns only when usage passes it, which the hard limit refuses)
    expect(ConfigProfileSchema.parse({ extends: 'scratch', softHomeBytes: 4 * 1024 ** 2, softInodes: 4096 }).softInodes).toBe(4096);
    // no hard limit: any soft limit
    expect(ConfigProfileSchema.parse({ extends: 'posix', softHomeBytes: 2 ** 50, softInodes: 10 })).toMatchObject({ softHomeBytes: 2 ** 50 });
    const over = ConfigProfileSchema.safeParse({ extends: 'scratch', softHomeBytes: 4 * 1024 ** 2 + 1, softInodes: 4097 });
    expect(over.success).toBe(false);
    expect(over.error?.issues.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['softHomeBytes', 'softHomeBytes (4194305) must be at most maxHomeBytes (4194304)'],
      ['softInodes', 'softInodes (4097) must be at most maxInodes (4096)'],
    ]);
    // a lowered hard limit in the same override is what the soft limit is checked against
    expect(ConfigProfileSchema.safeParse({ extends: 'home', maxHomeBytes: 1000, softHomeBytes: 1001 }).success).toBe(false);
    expect(ConfigProfileSchema.safeParse({ extends: 'home', softHomeBytes: -1 }).success).toBe(false);
    expect(ConfigProfileSchema.safeParse({ extends: 'home', softInodes: 0.5 }).success).toBe(false);
  });

  it('refuses a missing field', () => {
    const { xattrs: _omit, ...rest } = home;
    expect(ProfileSchema.safeParse(rest).success).toBe(false);
  });

  it.each([
    { name: 'home', ok: true },
    { name: 'team-a_2', ok: true },
    { name: '', ok: false },
    { name: 'Home', ok: false },
    { name: '1st', ok: false },
    { name: 'a'.repeat(65), ok: false },
  ])('profile name "$name" valid: $ok', ({ name, ok }) => {
    expect(ProfileNameSchema.safeParse(name).success).toBe(ok);
  });
});

describe('resolveProfileName', () => {
  it.each([
    { input: { override: 'posix', homeEntry: 'scratch', tenantDefault: 'x', configDefault: 'home' }, want: { name: 'posix', source: 'override' } },
    { input: { homeEntry: 'scratch', tenantDefault: 'x', configDefault: 'home' }, want: { name: 'scratch', source: 'home' } },
    { input: { tenantDefault: 'x', configDefault: 'home' }, want: { name: 'x', source: 'tenant' } },
    { input: { configDefault: 'home' }, want: { name: 'home', source: 'default' } },
    { input: { override: '', homeEntry: '', tenantDefault: '', configDefault: 'home' }, want: { name: 'home', source: 'default' } },
  ])('$want.source wins: $want.name', ({ input, want }) => {
    expect(resolveProfileName(input)).toEqual(want);
  });

  it('always picks the highest-precedence level that is set', () => {
    const level = fc.option(fc.constantFrom('home', 'scratch', 'posix', 'custom'), { nil: undefined });
    fc.assert(
      fc.property(level, level, level, fc.constantFrom('home', 'scratch'), (override, homeEntry, tenantDefault, configDefault) => {
        const got = resolveProfileName({ override, homeEntry, tenantDefault, configDefault });
        const levels = [
          [override, 'override'],
          [homeEntry, 'home'],
          [tenantDefault, 'tenant'],
          [configDefault, 'default'],
        ] as const;
        const first = levels.find(([v]) => v !== undefined)!;
        expect(got).toEqual({ name: first[0], source: first[1] });
      }),
      { numRuns: 200 },
    );
  });
});

describe('validateProfileNames', () => {
  it('lists unknown names once, in order', () => {
    const defined: Record<string, Profile> = { ...BUILTIN_PROFILES, team: home };
    expect(validateProfileNames(['home', 'nope', 'team', 'nope', 'other', 'posix'], defined)).toEqual(['nope', 'other']);
    expect(validateProfileNames([], defined)).toEqual([]);
  });

  it('does not mistake Object.prototype members for profiles', () => {
    expect(validateProfileNames(['constructor', '__proto__', 'toString', 'hasOwnProperty'], { ...BUILTIN_PROFILES })).toEqual([
      'constructor',
      '__proto__',
      'toString',
      'hasOwnProperty',
    ]);
  });
});

describe('mode helpers', () => {
  /** the home profile as it was before it became a tool home: chmod ignored, no u+x */
  const legacy = withProfile(home, { allowUserExec: false, chmod: 'ignore' });
  const execHome = withProfile(legacy, { allowUserExec: true });
  it.each([
    { name: 'home forces 0600 over 0644', p: legacy, req: 0o644, want: 0o600 },
    { name: 'home drops u+x', p: legacy, req: 0o755, want: 0o600 },
    { name: 'home+allowUserExec keeps a requested u+x', p: execHome, req: 0o755, want: 0o700 },
    { name: 'home+allowUserExec adds no u+x unasked', p: execHome, req: 0o644, want: 0o600 },
    { name: 'home+allowUserExec ignores g+x/o+x', p: execHome, req: 0o611, want: 0o600 },
    { name: 'scratch forces 0600', p: scratch, req: 0o777, want: 0o600 },
    { name: 'tool home: 0600 unless created executable', p: home, req: 0o666, want: 0o600 },
    { name: 'tool home: created executable is 0700', p: home, req: 0o775, want: 0o700 },
    { name: 'posix keeps the asked mode', p: posix, req: 0o640, want: 0o640 },
    { name: 'posix keeps setuid (specialBits keep)', p: posix, req: 0o4755, want: 0o4755 },
    { name: 'asked + specialBits drop strips setuid', p: withProfile(posix, { specialBits: 'drop' }), req: 0o4755, want: 0o755 },
  ])('file: $name', ({ p, req, want }) => {
    expect(effectiveFileMode(p, req)).toBe(want);
  });

  it.each([
    { name: 'home forces 0700', p: legacy, req: 0o755, want: 0o700 },
    { name: 'scratch forces 0700', p: scratch, req: 0o777, want: 0o700 },
    { name: 'posix keeps the asked mode', p: posix, req: 0o750, want: 0o750 },
    { name: 'posix keeps sticky/setgid', p: posix, req: 0o3775, want: 0o3775 },
    { name: 'asked + specialBits drop strips sticky/setgid', p: withProfile(posix, { specialBits: 'drop' }), req: 0o3775, want: 0o775 },
  ])('dir: $name', ({ p, req, want }) => {
    expect(effectiveDirMode(p, req)).toBe(want);
  });

  const S_IFREG = 0o100000;
  const S_IFDIR = 0o040000;
  it.each([
    { name: 'home: chmod +x is a successful no-op', p: legacy, dir: false, cur: S_IFREG | 0o600, req: 0o700, want: { action: 'keep' } },
    { name: 'home: chmod 644 keeps 0600', p: legacy, dir: false, cur: S_IFREG | 0o600, req: 0o644, want: { action: 'keep' } },
    { name: 'home: a drifted file is put back to 0600', p: legacy, dir: false, cur: S_IFREG | 0o644, req: 0o644, want: { action: 'apply', mode: 0o600 } },
    { name: 'home: dir chmod 755 keeps 0700', p: legacy, dir: true, cur: S_IFDIR | 0o700, req: 0o755, want: { action: 'keep' } },
    { name: 'home+exec: chmod +x applies 0700', p: execHome, dir: false, cur: S_IFREG | 0o600, req: 0o755, want: { action: 'apply', mode: 0o700 } },
    { name: 'home+exec: chmod -x applies 0600', p: execHome, dir: false, cur: S_IFREG | 0o700, req: 0o644, want: { action: 'apply', mode: 0o600 } },
    { name: 'scratch: chmod +x refused', p: scratch, dir: false, cur: S_IFREG | 0o600, req: 0o700, want: { action: 'refuse' } },
    { name: 'scratch: chmod 644 refused', p: scratch, dir: false, cur: S_IFREG | 0o600, req: 0o644, want: { action: 'refuse' } },
    { name: 'scratch: chmod 400 narrows', p: scratch, dir: false, cur: S_IFREG | 0o600, req: 0o400, want: { action: 'apply', mode: 0o400 } },
    { name: 'scratch: chmod 600 after 400 is allowed', p: scratch, dir: false, cur: S_IFREG | 0o400, req: 0o600, want: { action: 'apply', mode: 0o600 } },
    { name: 'scratch: same mode is a no-op', p: scratch, dir: false, cur: S_IFREG | 0o600, req: 0o600, want: { action: 'keep' } },
    { name: 'scratch: setuid refused', p: scratch, dir: false, cur: S_IFREG | 0o600, req: 0o4600, want: { action: 'refuse' } },
    { name: 'scratch: dir 755 refused', p: scratch, dir: true, cur: S_IFDIR | 0o700, req: 0o755, want: { action: 'refuse' } },
    { name: 'scratch: dir 500 narrows', p: scratch, dir: true, cur: S_IFDIR | 0o700, req: 0o500, want: { action: 'apply', mode: 0o500 } },
    { name: 'tool home: chmod 755 keeps the owner bits 0700', p: home, dir: false, cur: S_IFREG | 0o600, req: 0o755, want: { action: 'apply', mode: 0o700 } },
    { name: 'tool home: chmod 444 (git objects) applies 0400', p: home, dir: false, cur: S_IFREG | 0o600, req: 0o444, want: { action: 'apply', mode: 0o400 } },
    { name: 'tool home: setuid/setgid/sticky and group bits dropped silently', p: home, dir: false, cur: S_IFREG | 0o700, req: 0o7777, want: { action: 'keep' } },
    { name: 'tool home: chmod -x', p: home, dir: false, cur: S_IFREG | 0o700, req: 0o644, want: { action: 'apply', mode: 0o600 } },
    { name: 'tool home: dir 2775 keeps 0700', p: home, dir: true, cur: S_IFDIR | 0o700, req: 0o2775, want: { action: 'keep' } },
    { name: 'tool home: dir 500 applies', p: home, dir: true, cur: S_IFDIR | 0o700, req: 0o555, want: { action: 'apply', mode: 0o500 } },
    { name: 'posix: chmod 755 applies', p: posix, dir: false, cur: S_IFREG | 0o644, req: 0o755, want: { action: 'apply', mode: 0o755 } },
    { name: 'posix: setuid kept', p: posix, dir: false, cur: S_IFREG | 0o644, req: 0o4755, want: { action: 'apply', mode: 0o4755 } },
    { name: 'posix: dropping only the sticky bit applies', p: posix, dir: true, cur: S_IFDIR | 0o1777, req: 0o777, want: { action: 'apply', mode: 0o777 } },
    { name: 'posix: same mode with sticky is a no-op', p: posix, dir: true, cur: S_IFDIR | 0o1777, req: 0o1777, want: { action: 'keep' } },
    { name: 'allow + specialBits drop: setuid dropped', p: withProfile(posix, { specialBits: 'drop' }), dir: false, cur: S_IFREG | 0o644, req: 0o4755, want: { action: 'apply', mode: 0o755 } },
    { name: 'asked + ignore: nothing to force, no-op', p: withProfile(posix, { chmod: 'ignore' }), dir: false, cur: 0o644, req: 0o777, want: { action: 'keep' } },
    { name: 'asked + deny-widen: ceiling is the current mode', p: withProfile(posix, { chmod: 'deny-widen' }), dir: false, cur: 0o640, req: 0o644, want: { action: 'refuse' } },
    { name: 'asked + deny-widen: narrowing applies', p: withProfile(posix, { chmod: 'deny-widen' }), dir: false, cur: 0o640, req: 0o600, want: { action: 'apply', mode: 0o600 } },
  ])('chmod: $name', ({ p, dir, cur, req, want }) => {
    expect(chmodDecision(p, dir, cur, req)).toEqual(want);
  });

  it('tool home: whatever is asked, only owner bits result, and they are the asked ones', () => {
    const mode = fc.integer({ min: 0, max: 0o7777 });
    fc.assert(
      fc.property(fc.boolean(), mode, mode, (isDir, cur, req) => {
        const d = chmodDecision(home, isDir, cur, req);
        const final = d.action === 'apply' ? d.mode : d.action === 'keep' ? cur & 0o777 : -1;
        expect(final).toBe(req & 0o700);
      }),
      { numRuns: 300 },
    );
  });

  it('deny-widen never yields bits beyond the forced mode; ignore never moves off it', () => {
    const mode = fc.integer({ min: 0, max: 0o7777 });
    fc.assert(
      fc.property(fc.boolean(), fc.boolean(), mode, mode, (isDir, exec, cur, req) => {
        const s = withProfile(scratch, { allowUserExec: exec });
        const ceiling = (isDir ? 0o700 : 0o600) | (exec && !isDir ? 0o100 : 0);
        const d = chmodDecision(s, isDir, cur, req);
        if (d.action === 'apply') expect(d.mode & ~ceiling).toBe(0);
        if (d.action === 'refuse') expect((req & ~ceiling) !== 0).toBe(true);
        const h = chmodDecision(withProfile(legacy, { allowUserExec: exec }), isDir, cur, req);
        expect(h.action).not.toBe('refuse');
        const final = h.action === 'apply' ? h.mode : cur & 0o777;
        if (isDir) expect(final).toBe(0o700);
        else expect([0o600, exec ? 0o700 : 0o600]).toContain(final);
      }),
      { numRuns: 300 },
    );
  });
});

describe('special files', () => {
  it('maySpecial: none / fifo-socket / all, devices only for uid 0', () => {
    const kinds = ['fifo', 'socket', 'char', 'block'] as const;
    const table = (p: Profile, uid: number) => kinds.map((k) => maySpecial(p, k, uid));
    expect(table(BUILTIN_PROFILES.scratch, 0)).toEqual([false, false, false, false]);
    expect(table(BUILTIN_PROFILES.home, 0)).toEqual([true, true, false, false]);
    expect(table(BUILTIN_PROFILES.home, 1000)).toEqual([true, true, false, false]);
    expect(table(BUILTIN_PROFILES.posix, 0)).toEqual([true, true, true, true]);
    expect(table(BUILTIN_PROFILES.posix, 1000)).toEqual([true, true, false, false]);
  });

  it("accepts the older spellings 'deny' and 'allow'", () => {
    expect(ProfileSchema.parse({ ...BUILTIN_PROFILES.home, specialFiles: 'deny' }).specialFiles).toBe('none');
    expect(ProfileSchema.parse({ ...BUILTIN_PROFILES.home, specialFiles: 'allow' }).specialFiles).toBe('all');
    expect(() => ProfileSchema.parse({ ...BUILTIN_PROFILES.home, specialFiles: 'some' })).toThrow();
  });
});

describe('symlinkTargetInsideHome', () => {
  it.each([
    { dir: [], target: 'file', want: true },
    { dir: [], target: './file', want: true },
    { dir: [], target: '.', want: true },
    { dir: ['a'], target: '../file', want: true },
    { dir: ['a', 'b'], target: '../../file', want: true },
    { dir: ['a', 'b'], target: '../../../file', want: false },
    { dir: [], target: '..', want: false },
    { dir: [], target: '../home/file', want: false },
    { dir: ['a'], target: '/etc/passwd', want: false },
    { dir: ['a'], target: '', want: false },
    { dir: ['a'], target: 'x\0y', want: false },
    { dir: [], target: 'x/../y', want: false },
    { dir: ['a'], target: 'sub//deeper/', want: true },
    { dir: ['..'], target: 'x', want: false },
    { dir: ['a/b'], target: 'x', want: false },
  ])('$dir + "$target" -> $want', ({ dir, target, want }) => {
    expect(symlinkTargetInsideHome(dir, target)).toBe(want);
  });

  const component = fc.constantFrom('a', 'b', 'c');
  const targetComponent = fc.constantFrom('a', 'b', 'c', '.', '..', '..', '');
  const targetArb = fc
    .tuple(fc.boolean(), fc.array(targetComponent, { maxLength: 6 }))
    .map(([abs, parts]) => (abs ? '/' : '') + parts.join('/'));

  it('never says inside for a target that climbs out (lexically)', () => {
    fc.assert(
      fc.property(fc.array(component, { maxLength: 4 }), targetArb, (dir, target) => {
        let depth = dir.length;
        let escapes = target.startsWith('/') || target === '';
        for (const c of target.split('/')) {
          if (c === '..') depth -= 1;
          else if (c !== '' && c !== '.') depth += 1;
          if (depth < 0) escapes = true;
        }
        if (escapes) expect(symlinkTargetInsideHome(dir, target)).toBe(false);
      }),
      { numRuns: 500 },
    );
  });

  /**
   * The kernel resolves `..` physically. Build random trees where every symlink
   * was admitted by the check, then follow each link the way the kernel would:
   * none may lead above the home root.
   */
  const HOME_PATH = '/m/t/k';
  const SCOPE = { homePaths: [HOME_PATH, '/home/user'], systemPrefixes: ['/usr/'] };
  const absTargetArb = fc
    .tuple(fc.constantFrom(`${HOME_PATH}`, '/home/user', '/usr', '/usr/', '/m/t', '/m/t/k2', '/etc', '/home/user2'), fc.array(targetComponent, { maxLength: 4 }))
    .map(([prefix, parts]) => [prefix, ...parts].join('/'));

  it.each([
    { dir: ['bin'], target: '/usr/bin/python3', want: true },
    { dir: [], target: '/usr', want: true },
    { dir: [], target: '/usr/../etc/shadow', want: false },
    { dir: [], target: '/usrx/bin', want: false },
    { dir: [], target: '/etc/shadow', want: false },
    { dir: [], target: `${HOME_PATH}/.sdkman/candidates/java/21`, want: true },
    { dir: [], target: HOME_PATH, want: true },
    { dir: [], target: `${HOME_PATH}//./x`, want: true },
    { dir: [], target: `${HOME_PATH}/a/../../k2/x`, want: false },
    { dir: [], target: `${HOME_PATH}2/x`, want: false },
    { dir: [], target: '/m/t/k2/x', want: false },
    { dir: ['a'], target: '/home/user/my-app', want: true },
    { dir: ['a'], target: '/home/user2', want: false },
    { dir: ['a'], target: '/', want: false },
  ])('with a scope: $dir + "$target" -> $want', ({ dir, target, want }) => {
    expect(symlinkTargetInsideHome(dir, target, SCOPE)).toBe(want);
    // Without a scope no absolute target is inside.
    if (target.startsWith('/')) expect(symlinkTargetInsideHome(dir, target)).toBe(false);
  });

  /**
   * The kernel resolves `..` physically. Build random trees where every symlink
   * was admitted by the check, then follow each link the way the kernel would:
   * none may lead above the home root. With a scope, absolute targets lead to
   * the home root (its path or alias) or into a system tree (allowed; its
   * parent is not).
   */
  it.each([
    { name: 'relative targets only', scope: undefined },
    { name: 'home paths, aliases and system prefixes', scope: SCOPE },
  ])('admitted symlinks never resolve outside the home (physical `..`): $name', ({ scope }) => {
    interface Dir {
      kind: 'dir';
      parent: Dir | null;
      children: Map<string, Dir | Link>;
    }
    interface Link {
      kind: 'link';
      parent: Dir;
      target: string;
    }
    const ESCAPE = Symbol('escape');
    const STOP = Symbol('stop'); // ENOENT or ELOOP: the kernel fails, fine
    const SYSTEM = Symbol('system'); // somewhere below /usr/: allowed, read-only
    const pathOf = (d: Dir): string[] => {
      const out: string[] = [];
      for (let cur = d; cur.parent !== null; cur = cur.parent) {
        for (const [name, node] of cur.parent.children) if (node === cur) out.unshift(name);
      }
      return out;
    };
    type Where = Dir | typeof ESCAPE | typeof STOP | typeof SYSTEM;
    let root!: Dir;
    const resolve = (from: Dir, target: string, hops: number): Where => {
      let cur: Dir | typeof SYSTEM = from;
      let parts = target.split('/');
      if (target.startsWith('/')) {
        const norm = parts.filter((c) => c !== '' && c !== '.');
        const homeLen = [HOME_PATH, '/home/user'].map((h) => h.split('/').length - 1).find((n, i) => norm.slice(0, n).join('/') === [HOME_PATH, '/home/user'][i]!.slice(1));
        if (homeLen !== undefined) {
          cur = root;
          parts = norm.slice(homeLen);
        } else if (norm[0] === 'usr') {
          cur = SYSTEM;
          parts = norm.slice(1);
        } else return ESCAPE;
      }
      // Depth below the system prefix: `..` back above it leaves the allowed trees.
      let sysDepth = 0;
      for (const c of parts) {
        if (c === '' || c === '.') continue;
        if (cur === SYSTEM) {
          if (c === '..') {
            if (sysDepth === 0) return ESCAPE;
            sysDepth--;
          } else sysDepth++;
          continue;
        }
        if (c === '..') {
          if (cur.parent === null) return ESCAPE;
          cur = cur.parent;
          continue;
        }
        const child = cur.children.get(c);
        if (child === undefined) return STOP;
        if (child.kind === 'dir') {
          cur = child;
          continue;
        }
        if (hops >= 40) return STOP;
        const r = resolve(child.parent, child.target, hops + 1);
        if (r === ESCAPE || r === STOP) return r;
        // A link into a system tree: what lies below it is not modelled, and a later `..` could climb anywhere.
        if (r === SYSTEM) {
          cur = SYSTEM;
          sysDepth = Number.POSITIVE_INFINITY;
          continue;
        }
        cur = r;
      }
      return cur;
    };

    const op = fc.oneof(
      fc.record({ t: fc.constant('mkdir' as const), at: fc.nat(), name: component }),
      fc.record({ t: fc.constant('symlink' as const), at: fc.nat(), name: component, target: scope ? fc.oneof(targetArb, absTargetArb) : targetArb }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 25 }), (ops) => {
        root = { kind: 'dir', parent: null, children: new Map() };
        const dirs: Dir[] = [root];
        const links: Link[] = [];
        for (const o of ops) {
          const at = dirs[o.at % dirs.length]!;
          if (at.children.has(o.name)) continue;
          if (o.t === 'mkdir') {
            const d: Dir = { kind: 'dir', parent: at, children: new Map() };
            at.children.set(o.name, d);
            dirs.push(d);
          } else if (symlinkTargetInsideHome(pathOf(at), o.target, scope)) {
            const l: Link = { kind: 'link', parent: at, target: o.target };
            at.children.set(o.name, l);
            links.push(l);
          }
        }
        for (const l of links) expect(resolve(l.parent, l.target, 0)).not.toBe(ESCAPE);
      }),
      { numRuns: 500 },
    );
  });
});
