import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig, ConfigError, DEMO_DEFAULTS, loadConfig, reloadConfig, stateFileOf } from '../../src/config/load.js';
import { jsonErrorOffset, lineColumn } from '../../src/config/json-position.js';
import { distance, nearest } from '../../src/config/suggest.js';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { parseSize } from '../../src/policy/size.js';
import { parseSize as cliParseSize } from '../../src/cli/size.js';

const MIN = { backing: '/srv/backing', mount: '/srv/homes' } as const;

/** A full custom profile (every field is required by the schema). */
const CUSTOM = { ...BUILTIN_PROFILES.home, maxHomeBytes: 1024 * 1024, content: 'utf8' as const };

function issuesOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    const ce = err as ConfigError;
    expect(ce.name).toBe('ConfigError');
    // The message lists every issue.
    for (const i of ce.issues) expect(ce.message).toContain(i);
    return ce.issues;
  }
  throw new Error('expected a ConfigError');
}

function isDeepFrozen(v: unknown, seen = new Set<unknown>()): boolean {
  if (v === null || typeof v !== 'object' || seen.has(v)) return true;
  seen.add(v);
  if (!Object.isFrozen(v)) return false;
  return Object.values(v as Record<string, unknown>).every((c) => isDeepFrozen(c, seen));
}

describe('buildConfig: defaults', () => {
  const loaded = buildConfig(MIN, '/etc/homesfs.json');

  it.each([
    ['backing', '/srv/backing'],
    ['mount', '/srv/homes'],
    ['socket', '/run/homesfs/admin.sock'],
    ['logLevel', 'info'],
    ['defaultProfile', 'home'],
    ['profiles', {}],
    ['tenants', {}],
    ['homes', {}],
  ] as const)('%s defaults to %j', (key, value) => {
    expect(loaded.config[key]).toEqual(value);
  });

  it('fuse options get their defaults', () => {
    expect(loaded.config.fuse).toEqual({
      attrTimeout: 300,
      entryTimeout: 300,
      negativeTimeout: 0,
      maxWrite: 1048576,
      kernelCache: false,
      readdirplus: true,
      passthrough: true,
      nativeRead: true,
      nativeWrite: true,
      nativeFastPath: true,
      nativeUnlink: true,
      nativeOpen: true,
      nativeCreate: true,
      nativeMkdir: true,
      nativeSymlink: true,
      nativeLink: true,
      nativeRmdir: true,
      nativeRename: true,
      nativeWriteDecision: true,
      nativeTruncate: true,
      noFlush: true,
      singleReader: false,
      nativeSetattr: true,
      nativeRelease: true,
      debug: false,
    });
  });

  it('probe options get their defaults', () => {
    expect(loaded.config.probe).toEqual({ intervalMs: 10_000, timeoutMs: 5_000 });
  });

  it('a partial fuse block is completed with defaults', () => {
    const c = buildConfig({ ...MIN, fuse: { maxWrite: 65536 } }, null).config;
    expect(c.fuse.maxWrite).toBe(65536);
    expect(c.fuse.attrTimeout).toBe(300);
    expect(c.fuse.kernelCache).toBe(false);
  });

  it('records the path and lists the built-in profiles', () => {
    expect(loaded.path).toBe('/etc/homesfs.json');
    expect(buildConfig(MIN, null).path).toBeNull();
    expect(Object.keys(loaded.profiles).sort()).toEqual(['home', 'posix', 'scratch']);
    expect(loaded.profiles.home).toEqual(BUILTIN_PROFILES.home);
  });

  it('the result is deep-frozen', () => {
    const l = buildConfig(
      {
        ...MIN,
        profiles: { custom: CUSTOM },
        tenants: { acme: { defaultProfile: 'scratch' } },
        homes: { 'acme/proj': { owner: { uid: 1000, gid: 1000 }, profile: 'custom' } },
      },
      null,
    );
    expect(isDeepFrozen(l)).toBe(true);
    expect(Object.isFrozen(l.config.fuse)).toBe(true);
    expect(Object.isFrozen(l.config.homes['acme/proj']!.owner)).toBe(true);
    expect(Object.isFrozen(l.profiles.custom)).toBe(true);
    expect(() => {
      (l.config as { logLevel: string }).logLevel = 'debug';
    }).toThrow(TypeError);
    expect(() => {
      (l.config.fuse as { maxWrite: number }).maxWrite = 4096;
    }).toThrow(TypeError);
    expect(() => {
      (l.profiles as Record<string, unknown>).extra = {};
    }).toThrow(TypeError);
  });

  it('two builds do not share mutable state', () => {
    const a = buildConfig(MIN, null);
    const b = buildConfig({ ...MIN, fuse: { debug: true } }, null);
    expect(a.config.fuse.debug).toBe(false);
    expect(b.config.fuse.debug).toBe(true);
    expect(buildConfig(MIN, null).config.fuse.debug).toBe(false);
  });
});

describe('buildConfig: refusals', () => {
  const cases: Array<[string, Record<string, unknown>, RegExp[]]> = [
    ['unknown top-level key', { ...MIN, bogus: 1 }, [/^\(root\): .*bogus/]],
    ['unknown key in fuse', { ...MIN, fuse: { nope: true } }, [/^fuse: .*nope/]],
    ['unknown key in probe', { ...MIN, probe: { every: 1 } }, [/^probe: .*every/]],
    ['unknown key in a tenant', { ...MIN, tenants: { acme: { quota: 1 } } }, [/^tenants\.acme: .*quota/]],
    ['unknown key in a home', { ...MIN, homes: { 'acme/proj': { quota: 1 } } }, [/^homes\.acme\/proj: .*quota/]],
    ['unknown key in an owner', { ...MIN, homes: { 'acme/proj': { owner: { uid: 1, gid: 1, x: 1 } } } }, [/^homes\.acme\/proj\.owner: .*x/]],
    ['unknown key in a profile', { ...MIN, profiles: { custom: { ...CUSTOM, turbo: true } } }, [/^profiles\.custom: .*turbo/]],
    ['missing backing', { mount: '/m' }, [/^backing: /]],
    ['missing mount', { backing: '/b' }, [/^mount: /]],
    ['empty backing', { ...MIN, backing: '' }, [/^backing: /]],
    ['relative backing', { ...MIN, backing: 'srv/backing' }, [/^backing: must be an absolute path$/]],
    ['relative mount', { ...MIN, mount: './homes' }, [/^mount: must be an absolute path$/]],
    ['relative socket', { ...MIN, socket: 'admin.sock' }, [/^socket: must be an absolute path$/]],
    ['bad logLevel', { ...MIN, logLevel: 'verbose' }, [/^logLevel: /]],
    ['maxWrite too big', { ...MIN, fuse: { maxWrite: 2097152 } }, [/^fuse\.maxWrite: /]],
    ['maxWrite too small', { ...MIN, fuse: { maxWrite: 1024 } }, [/^fuse\.maxWrite: /]],
    ['probe interval too small', { ...MIN, probe: { intervalMs: 10 } }, [/^probe\.intervalMs: /]],
    ['negative uid', { ...MIN, homes: { 'a/b': { owner: { uid: -1, gid: 0 } } } }, [/^homes\.a\/b\.owner\.uid: /]],
    ['unknown defaultProfile', { ...MIN, defaultProfile: 'nope' }, [/^defaultProfile: unknown profile "nope"$/]],
    [
      'unknown tenant defaultProfile',
      { ...MIN, tenants: { acme: { defaultProfile: 'nope' } } },
      [/^tenants\.acme\.defaultProfile: unknown profile "nope"$/],
    ],
    ['unknown home profile', { ...MIN, homes: { 'acme/proj': { profile: 'nope' } } }, [/^homes\.acme\/proj\.profile: unknown profile "nope"$/]],
    ['redefined built-in home', { ...MIN, profiles: { home: CUSTOM } }, [/^profiles\.home: redefines a built-in profile$/]],
    ['redefined built-in posix', { ...MIN, profiles: { posix: BUILTIN_PROFILES.posix } }, [/^profiles\.posix: redefines a built-in profile$/]],
    ['profile name with capitals', { ...MIN, profiles: { Custom: CUSTOM } }, [/^profiles\.Custom: /]],
    ['profile missing a field', { ...MIN, profiles: { custom: (({ content: _c, ...rest }) => rest)(CUSTOM) } }, [/^profiles\.custom\.content: /]],
    ['extends an unknown base', { ...MIN, profiles: { custom: { extends: 'nope' } } }, [/^profiles\.custom\.extends: /]],
    ['extends with a bad override', { ...MIN, profiles: { custom: { extends: 'home', maxHomeBytes: -5 } } }, [/^profiles\.custom\.maxHomeBytes: /]],
    ['extends with a locked-out mode', { ...MIN, profiles: { custom: { extends: 'home', fileMode: '0400' } } }, [/^profiles\.custom\.fileMode: .*u\+rw/]],
    ['extends with an unknown key', { ...MIN, profiles: { custom: { extends: 'home', turbo: 1 } } }, [/^profiles\.custom: .*turbo/]],
    ['a relative system prefix', { ...MIN, profiles: { custom: { extends: 'home', symlinkSystemPrefixes: ['usr/'] } } }, [/^profiles\.custom\.symlinkSystemPrefixes\.0: /]],
    ['"/" as a system prefix', { ...MIN, profiles: { custom: { extends: 'home', symlinkSystemPrefixes: ['/'] } } }, [/^profiles\.custom\.symlinkSystemPrefixes\.0: /]],
    ['an alias with ".."', { ...MIN, profiles: { custom: { extends: 'home', homeAliases: ['/home/../etc'] } } }, [/^profiles\.custom\.homeAliases\.0: /]],
    ['profile with a locked-out file mode', { ...MIN, profiles: { custom: { ...CUSTOM, fileMode: 0o400 } } }, [/^profiles\.custom\.fileMode: .*u\+rw/]],
    ['tenant with leading dot', { ...MIN, tenants: { '.acme': {} } }, [/^tenants\.\.acme: .*"\."/]],
    ['tenant with backslash', { ...MIN, tenants: { 'a\\b': {} } }, [/^tenants\.a\\b: /]],
    ['tenant with control char', { ...MIN, tenants: { 'a\tb': {} } }, [/^tenants\.a\tb: .*control/]],
    ['tenant dot-dot', { ...MIN, tenants: { '..': {} } }, [/^tenants\.\.\.: /]],
    ['home without a slash', { ...MIN, homes: { acme: {} } }, [/^homes\.acme: /]],
    ['home with two slashes', { ...MIN, homes: { 'a/b/c': {} } }, [/^homes\.a\/b\/c: .*<tenant>\/<key>/]],
    ['home with empty key', { ...MIN, homes: { 'acme/': {} } }, [/^homes\.acme\/: /]],
    ['home with bad tenant', { ...MIN, homes: { '.acme/proj': {} } }, [/^homes\.\.acme\/proj: .*"\."/]],
    ['home with dot-dot tenant', { ...MIN, homes: { '../proj': {} } }, [/^homes\.\.\.\/proj: /]],
    ['home with dot-dot key', { ...MIN, homes: { 'acme/..': {} } }, [/^homes\.acme\/\.\.: /]],
    ['home with reserved key', { ...MIN, homes: { 'acme/_other': {} } }, [/^homes\.acme\/_other: .*reserved/]],
    ['home with empty login', { ...MIN, homes: { 'acme/_user_': {} } }, [/^homes\.acme\/_user_: /]],
    ['home with backslash key', { ...MIN, homes: { 'acme/p\\q': {} } }, [/^homes\.acme\/p\\q: /]],
  ];
  it.each(cases)('%s', (_label, input, patterns) => {
    const issues = issuesOf(() => buildConfig(input, null));
    expect(issues).toHaveLength(patterns.length);
    patterns.forEach((re, i) => expect(issues[i]).toMatch(re));
  });

  it('a non-object input is refused', () => {
    for (const input of [null, undefined, 42, 'x', [MIN]]) {
      expect(issuesOf(() => buildConfig(input, null)).length).toBeGreaterThan(0);
    }
  });

  it('reports all schema issues at once', () => {
    const issues = issuesOf(() => buildConfig({ ...MIN, bogus: 1, logLevel: 'loud', fuse: { maxWrite: 1, nope: 1 } }, null));
    expect(issues.some((i) => i.startsWith('(root):') && i.includes('bogus'))).toBe(true);
    expect(issues.some((i) => i.startsWith('logLevel:'))).toBe(true);
    expect(issues.some((i) => i.startsWith('fuse.maxWrite:'))).toBe(true);
    expect(issues.some((i) => i.startsWith('fuse:') && i.includes('nope'))).toBe(true);
  });

  it('reports all semantic issues at once', () => {
    const issues = issuesOf(() =>
      buildConfig(
        {
          backing: 'rel',
          mount: 'also-rel',
          defaultProfile: 'nope',
          profiles: { scratch: CUSTOM },
          tenants: { '.t': { defaultProfile: 'missing' } },
          homes: { 'acme/_bad': { profile: 'gone' } },
        },
        null,
      ),
    );
    expect(issues).toEqual([
      'backing: must be an absolute path',
      'mount: must be an absolute path',
      'profiles.scratch: redefines a built-in profile',
      'defaultProfile: unknown profile "nope"',
      'tenants..t: tenant may not begin with "."',
      'tenants..t.defaultProfile: unknown profile "missing"',
      expect.stringMatching(/^homes\.acme\/_bad: /),
      'homes.acme/_bad.profile: unknown profile "gone"',
    ]);
  });

  // The semantic checks also run when the schema fails: one run reports everything.
  it('reports schema and semantic issues together', () => {
    const issues = issuesOf(() => buildConfig({ ...MIN, bogus: 1, defaultProfile: 'nope' }, null));
    expect(issues.some((i) => i.includes('bogus'))).toBe(true);
    expect(issues.some((i) => i.startsWith('defaultProfile:'))).toBe(true);
  });
});

describe('buildConfig: accepted', () => {
  it('a custom profile is accepted, listed and usable everywhere', () => {
    const l = buildConfig(
      {
        ...MIN,
        defaultProfile: 'strict-text',
        profiles: { 'strict-text': CUSTOM },
        tenants: { acme: { defaultProfile: 'strict-text' } },
        homes: { 'acme/proj': { profile: 'strict-text' }, 'acme/_tenant': { profile: 'posix' } },
      },
      null,
    );
    expect(Object.keys(l.profiles).sort()).toEqual(['home', 'posix', 'scratch', 'strict-text']);
    expect(l.profiles['strict-text']).toEqual(CUSTOM);
    expect(l.config.profiles['strict-text']).toEqual(CUSTOM);
    expect(l.config.defaultProfile).toBe('strict-text');
  });

  it('a profile that extends a built-in overrides only the fields it names', () => {
    const l = buildConfig(
      { ...MIN, profiles: { big: { extends: 'home', maxHomeBytes: 10737418240, homeAliases: ['/home/user'] } }, defaultProfile: 'big' },
      null,
    );
    expect(l.profiles.big).toEqual({ ...BUILTIN_PROFILES.home, maxHomeBytes: 10737418240, homeAliases: ['/home/user'] });
    expect(l.profiles.big).not.toHaveProperty('extends');
    const s = buildConfig({ ...MIN, profiles: { notes: { extends: 'scratch', maxFileBytes: 0 } } }, null);
    expect(s.profiles.notes).toEqual({ ...BUILTIN_PROFILES.scratch, maxFileBytes: 0 });
  });

  it('profile modes may be written as octal strings', () => {
    const l = buildConfig({ ...MIN, profiles: { octal: { ...CUSTOM, fileMode: '0640', dirMode: '0750' } } }, null);
    expect(l.profiles.octal!.fileMode).toBe(0o640);
    expect(l.profiles.octal!.dirMode).toBe(0o750);
  });

  it.each(['acme/_tenant', 'acme/_user_alice', 'acme/proj', 'équipe/projet-1', '_tenant/_tenant'])('home id %s is accepted', (id) => {
    const l = buildConfig({ ...MIN, homes: { [id]: { owner: { uid: 1000, gid: 1000 } } } }, null);
    expect(l.config.homes[id]).toEqual({ owner: { uid: 1000, gid: 1000 } });
  });

  it.each(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const)('logLevel %s is accepted', (level) => {
    expect(buildConfig({ ...MIN, logLevel: level }, null).config.logLevel).toBe(level);
  });
});

describe('loadConfig', () => {
  let dir: string;
  const write = (name: string, text: string) => {
    const p = join(dir, name);
    writeFileSync(p, text);
    return p;
  };

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-config-test-'));
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('--demo without a file gives the demo defaults', () => {
    const l = loadConfig(undefined, {}, { demo: true });
    expect(l.path).toBeNull();
    expect(l.config.backing).toBe(DEMO_DEFAULTS.backing);
    expect(l.config.mount).toBe(DEMO_DEFAULTS.mount);
    expect(l.config.socket).toBe(DEMO_DEFAULTS.socket);
    expect(l.config.defaultProfile).toBe('home');
    expect(l.config.logLevel).toBe('info');
    expect(isDeepFrozen(l)).toBe(true);
  });

  it('no file, no demo: only the flags, and the state lives under the backing', () => {
    const l = loadConfig(undefined, { backing: '/x/backing', mount: '/x/mnt' });
    expect(l.config.backing).toBe('/x/backing');
    expect(l.config.socket).toBe('/run/homesfs/admin.sock');
    expect(stateFileOf(l.config)).toBe('/x/backing/.homesfs/state.json');
    expect(issuesOf(() => loadConfig(undefined, { backing: '/x/backing' })).some((i) => i.startsWith('mount:'))).toBe(true);
  });

  it('stateFile overrides the place under the backing', () => {
    const l = loadConfig(undefined, { backing: '/x/backing', mount: '/x/mnt', stateFile: '/var/lib/other/state.json' });
    expect(stateFileOf(l.config)).toBe('/var/lib/other/state.json');
  });

  it('JSON syntax errors name the line and column', () => {
    const text = '{\n  "backing": "/b",\n  "mount": ,\n}\n';
    const p = write('syntax.json', text);
    const issues = issuesOf(() => loadConfig(p, {}));
    expect(issues).toHaveLength(1);
    expect(issues[0]).toContain(`${p}:3:12:`);
    expect(issues[0]).toContain('line 3, column 12');
    const cut = write('cut.json', '{\n  "backing": "/b"');
    expect(issuesOf(() => loadConfig(cut, {}))[0]).toContain('line 2, column 18');
    // the scanner agrees with JSON.parse on what is valid, and points inside the text
    for (const bad of ['', '{', '{"a":1,}', '[1 2]', '{"a" 1}', '"\\x"', '01', '1.', 'tru', '{"a":"\u0001"}', '[]x', '{"a":-}']) {
      expect(() => JSON.parse(bad)).toThrow();
      expect(jsonErrorOffset(bad)).toBeLessThanOrEqual(bad.length);
    }
    expect(jsonErrorOffset('{"a":1,}')).toBe(7);
    expect(jsonErrorOffset('[1 2]')).toBe(3);
    expect(jsonErrorOffset('[]x')).toBe(2);
    expect(lineColumn('a\nbc', 3)).toEqual({ line: 2, column: 2 });
  });

  it('--demo: flags replace only the demo defaults they name', () => {
    const l = loadConfig(undefined, { backing: '/x/backing', logLevel: 'debug' }, { demo: true });
    expect(l.config.backing).toBe('/x/backing');
    expect(l.config.mount).toBe(DEMO_DEFAULTS.mount);
    expect(l.config.socket).toBe(DEMO_DEFAULTS.socket);
    expect(l.config.logLevel).toBe('debug');
  });

  it('undefined flags are ignored', () => {
    const p = write('undef.json', JSON.stringify({ ...MIN, logLevel: 'warn' }));
    const l = loadConfig(p, { backing: undefined, logLevel: undefined });
    expect(l.config.backing).toBe(MIN.backing);
    expect(l.config.logLevel).toBe('warn');
  });

  it('reads a file, records its path, applies schema defaults (not demo defaults)', () => {
    const p = write('ok.json', JSON.stringify(MIN));
    const l = loadConfig(p, {});
    expect(l.path).toBe(p);
    expect(l.config.backing).toBe(MIN.backing);
    expect(l.config.socket).toBe('/run/homesfs/admin.sock');
    expect(l.config.fuse.maxWrite).toBe(1048576);
  });

  it('a file without backing is refused (demo defaults apply only without a file)', () => {
    const p = write('nobacking.json', JSON.stringify({ mount: '/m' }));
    const issues = issuesOf(() => loadConfig(p, {}));
    expect(issues.some((i) => i.startsWith('backing:'))).toBe(true);
  });

  it('flags win over file values', () => {
    const p = write(
      'override.json',
      JSON.stringify({ ...MIN, socket: '/run/file.sock', logLevel: 'warn', defaultProfile: 'scratch', fuse: { debug: false, maxWrite: 8192 } }),
    );
    const l = loadConfig(p, { mount: '/flag/mount', socket: '/run/flag.sock', logLevel: 'trace', fuse: { debug: true } });
    expect(l.config.backing).toBe(MIN.backing); // from the file
    expect(l.config.mount).toBe('/flag/mount');
    expect(l.config.socket).toBe('/run/flag.sock');
    expect(l.config.logLevel).toBe('trace');
    expect(l.config.defaultProfile).toBe('scratch'); // from the file
    // Overrides replace top-level keys whole (shallow merge).
    expect(l.config.fuse.debug).toBe(true);
    expect(l.config.fuse.maxWrite).toBe(1048576);
  });

  it('flags are validated like file values', () => {
    const p = write('flagbad.json', JSON.stringify(MIN));
    expect(issuesOf(() => loadConfig(p, { mount: 'relative' }))).toEqual(['mount: must be an absolute path']);
    expect(issuesOf(() => loadConfig(undefined, { defaultProfile: 'nope' }, { demo: true }))).toEqual(['defaultProfile: unknown profile "nope"']);
  });

  const unreadable = (fn: () => unknown): ConfigError => {
    try {
      fn();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return err as ConfigError;
    }
    throw new Error('expected a ConfigError');
  };

  it('a missing file is "no such file", not an invalid configuration', async () => {
    const p = join(dir, 'does-not-exist.json');
    const e = unreadable(() => loadConfig(p, {}));
    expect(e.kind).toBe('unreadable');
    expect(e.issues).toEqual([`${p}: no such file`]);
    expect(e.message).toBe(`cannot read the configuration: ${p}: no such file`);
    expect(e.message).not.toContain('invalid');
    // a reload reads it the same way
    await expect(reloadConfig(p, {})).rejects.toMatchObject({ name: 'ConfigError', kind: 'unreadable', issues: [`${p}: no such file`] });
  });

  it('a path through a file, and a directory, are unreadable with a reason', () => {
    const f = write('plain.json', JSON.stringify(MIN));
    expect(unreadable(() => loadConfig(join(f, 'x.json'), {})).issues).toEqual([`${f}/x.json: no such file (a component of the path is not a directory)`]);
    const d = unreadable(() => loadConfig(dir, {}));
    expect(d.kind).toBe('unreadable');
    expect(d.issues).toEqual([`${dir}: is a directory, not a file`]);
  });

  it('a file that was read but is wrong is an invalid configuration', () => {
    const e = unreadable(() => loadConfig(write('wrong.json', JSON.stringify({ ...MIN, logLevel: 'loud' })), {}));
    expect(e.kind).toBe('invalid');
    expect(e.message).toMatch(/^invalid configuration:\n {2}logLevel: /);
  });

  it.each([
    ['invalid JSON', '{ "backing": "/b", ', /not valid JSON/],
    ['trailing comma', '{ "backing": "/b", "mount": "/m", }', /not valid JSON/],
    ['empty file', '', /not valid JSON/],
    ['JSON array', JSON.stringify([MIN]), /top level must be a JSON object/],
    ['JSON null', 'null', /top level must be a JSON object/],
    ['JSON string', '"hello"', /top level must be a JSON object/],
    ['JSON number', '42', /top level must be a JSON object/],
  ])('%s is a ConfigError', (label, text, re) => {
    const p = write(`${label.replace(/\W+/g, '-')}.json`, text);
    const issues = issuesOf(() => loadConfig(p, {}));
    expect(issues).toHaveLength(1);
    expect(issues[0]).toContain(p);
    expect(issues[0]).toMatch(re);
  });

  it('file issues are reported with their paths', () => {
    const p = write('bad.json', JSON.stringify({ ...MIN, homes: { 'acme/_nope': { profile: 'missing' } } }));
    const issues = issuesOf(() => loadConfig(p, {}));
    expect(issues).toHaveLength(2);
    expect(issues[0]).toMatch(/^homes\.acme\/_nope: /);
    expect(issues[1]).toBe('homes.acme/_nope.profile: unknown profile "missing"');
  });
});

describe('buildConfig: sizes as on the command line', () => {
  const Gi = 1024 ** 3;
  const Mi = 1024 ** 2;

  it('the CLI and the config read sizes with one parser', () => {
    expect(cliParseSize).toBe(parseSize);
  });

  it.each([
    ['2G', 2 * Gi],
    ['2g', 2 * Gi],
    ['1.5 GiB', 1.5 * Gi],
    ['2 GB', 2_000_000_000],
    ['2GB', 2_000_000_000],
    ['512 MiB', 512 * Mi],
    ['1e9', 1_000_000_000],
    ['4096', 4096],
    ['0', 0],
  ] as const)('tenant maxBytes %j = %d bytes', (text, bytes) => {
    expect(buildConfig({ ...MIN, tenants: { acme: { maxBytes: text } } }, null).config.tenants.acme!.maxBytes).toBe(bytes);
  });

  it('plain numbers still work, and the frozen config holds numbers only', () => {
    const l = buildConfig(
      {
        ...MIN,
        tenants: { acme: { maxBytes: 5 * Gi } },
        profiles: { big: { extends: 'home', maxHomeBytes: '1.5 GiB', maxFileBytes: '100M' }, full: { ...CUSTOM, maxHomeBytes: '3G', maxFileBytes: 7 } },
        fuse: { maxWrite: '64K' },
        exec: { rlimits: { fsize: { soft: '1G', hard: 'unlimited' }, as: { soft: '2 GB', hard: '4G' }, nofile: { soft: 1024, hard: 4096 } } },
      },
      null,
    );
    expect(l.config.tenants.acme!.maxBytes).toBe(5 * Gi);
    expect(l.profiles.big!.maxHomeBytes).toBe(1.5 * Gi);
    expect(l.profiles.big!.maxFileBytes).toBe(100 * Mi);
    expect(l.config.profiles.full!.maxHomeBytes).toBe(3 * Gi);
    expect(l.profiles.full!.maxFileBytes).toBe(7);
    expect(l.config.fuse.maxWrite).toBe(65536);
    expect(l.config.exec.rlimits).toEqual({ fsize: { soft: Gi, hard: 'unlimited' }, as: { soft: 2_000_000_000, hard: 4 * Gi }, nofile: { soft: 1024, hard: 4096 } });
    expect(isDeepFrozen(l)).toBe(true);
  });

  const bad: Array<[string, Record<string, unknown>, RegExp]> = [
    ['an unknown unit', { tenants: { acme: { maxBytes: '2X' } } }, /^tenants\.acme\.maxBytes: '2X': unknown unit 'X': expected a number of bytes/],
    ['Gi without B', { profiles: { p: { extends: 'home', maxHomeBytes: '5Gi' } } }, /^profiles\.p\.maxHomeBytes: '5Gi': unknown unit 'Gi'/],
    ['a negative size', { profiles: { p: { extends: 'home', maxFileBytes: '-1G' } } }, /^profiles\.p\.maxFileBytes: '-1G' is negative/],
    ['words', { tenants: { acme: { maxBytes: 'two gigs' } } }, /^tenants\.acme\.maxBytes: 'two gigs' is not a size/],
    ['an empty string', { tenants: { acme: { maxBytes: '' } } }, /^tenants\.acme\.maxBytes: '' is not a size/],
    ['a fraction of a byte that would mean off', { tenants: { acme: { maxBytes: '0.5' } } }, /^tenants\.acme\.maxBytes: '0\.5' rounds down to 0 bytes, which means "off"/],
    ['too large', { tenants: { acme: { maxBytes: '9P' } } }, /^tenants\.acme\.maxBytes: '9P' is too large/],
    ['a boolean', { tenants: { acme: { maxBytes: true } } }, /^tenants\.acme\.maxBytes: expected a size: a whole number of bytes or a string such as "2G"/],
    ['a fractional number', { tenants: { acme: { maxBytes: 1.5 } } }, /^tenants\.acme\.maxBytes: .*int/],
    ['maxWrite over 1 MiB as a size', { fuse: { maxWrite: '2M' } }, /^fuse\.maxWrite: .*1048576/],
    ['a size for a count rlimit', { exec: { rlimits: { nofile: { soft: '1K', hard: 4096 } } } }, /^exec\.rlimits\.nofile\.soft: a whole number \(0 or more\) or "unlimited"$/],
    ['a bad size for a byte rlimit', { exec: { rlimits: { fsize: { soft: '1Q', hard: 'unlimited' } } } }, /^exec\.rlimits\.fsize\.soft: '1Q': unknown unit 'Q'/],
    ['soft over hard in sizes', { exec: { rlimits: { as: { soft: '2G', hard: '1G' } } } }, /^exec\.rlimits\.as: soft must not exceed hard$/],
  ];
  it.each(bad)('%s is refused with its path', (_label, extra, re) => {
    const issues = issuesOf(() => buildConfig({ ...MIN, ...extra }, null));
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatch(re);
  });

  it('a size in a config file is read like one in the flags', () => {
    expect(buildConfig({ ...MIN, tenants: { a: { maxBytes: ' 10g ' } } }, null).config.tenants.a!.maxBytes).toBe(10 * Gi);
  });
});

describe('did you mean', () => {
  it.each([
    ['a top-level key', { ...MIN, logLevle: 'info' }, '(root): Unrecognized key: "logLevle" (did you mean "logLevel"?)'],
    ['a top-level key in the wrong case', { ...MIN, defaultprofile: 'home' }, '(root): Unrecognized key: "defaultprofile" (did you mean "defaultProfile"?)'],
    ['a tenant key', { ...MIN, tenants: { acme: { maxbytes: '2G' } } }, 'tenants.acme: Unrecognized key: "maxbytes" (did you mean "maxBytes"?)'],
    ['a fuse key', { ...MIN, fuse: { maxWrites: 4096 } }, 'fuse: Unrecognized key: "maxWrites" (did you mean "maxWrite"?)'],
    ['a profile key', { ...MIN, profiles: { p: { extends: 'home', maxHomeByte: 1 } } }, 'profiles.p: Unrecognized key: "maxHomeByte" (did you mean "maxHomeBytes"?)'],
    ['a full profile key', { ...MIN, profiles: { p: { ...CUSTOM, maxInode: 1 } } }, 'profiles.p: Unrecognized key: "maxInode" (did you mean "maxInodes"?)'],
    ['a home key', { ...MIN, homes: { 'acme/p': { proflie: 'home' } } }, 'homes.acme/p: Unrecognized key: "proflie" (did you mean "profile"?)'],
    ['an owner key', { ...MIN, homes: { 'acme/p': { owner: { uid: 1, gdi: 1 } } } }, expect.stringMatching(/^homes\.acme\/p\.owner: Unrecognized key: "gdi" \(did you mean "gid"\?\)$/)],
    ['an rlimit', { ...MIN, exec: { rlimits: { nofiles: { soft: 1, hard: 1 } } } }, 'exec.rlimits: Unrecognized key: "nofiles" (did you mean "nofile"?)'],
    ['a limits key', { ...MIN, limits: { openFilesPerUID: 1 } }, 'limits: Unrecognized key: "openFilesPerUID" (did you mean "openFilesPerUid"?)'],
    ['a profile name', { ...MIN, defaultProfile: 'hmoe' }, 'defaultProfile: unknown profile "hmoe" (did you mean "home"?)'],
    ['a custom profile name', { ...MIN, profiles: { 'big-home': { extends: 'home' } }, homes: { 'a/b': { profile: 'big_home' } } }, 'homes.a/b.profile: unknown profile "big_home" (did you mean "big-home"?)'],
  ] as const)('%s', (_label, input, issue) => {
    const issues = issuesOf(() => buildConfig(input, null));
    expect(issues).toContainEqual(issue);
  });

  it('says nothing when no known key is close, and names every unknown key', () => {
    expect(issuesOf(() => buildConfig({ ...MIN, bogus: 1 }, null))).toEqual(['(root): Unrecognized key: "bogus"']);
    expect(issuesOf(() => buildConfig({ ...MIN, tenants: { acme: { quota: 1 } } }, null))).toEqual(['tenants.acme: Unrecognized key: "quota"']);
    expect(issuesOf(() => buildConfig({ ...MIN, mountt: '/m', bogus: 1 }, null))).toEqual(['(root): Unrecognized keys: "mountt" (did you mean "mount"?), "bogus"']);
  });

  it('nearest: close words only, the closest first', () => {
    expect(nearest('maxbytes', ['maxBytes', 'defaultProfile'])).toBe('maxBytes');
    expect(nearest('sockte', ['socket', 'stateFile'])).toBe('socket');
    expect(nearest('bogus', ['backing', 'mount', 'owners'])).toBeUndefined();
    expect(nearest('x', ['uid', 'gid'])).toBeUndefined();
    expect(nearest('mount', ['mount'])).toBeUndefined();
    // case-only differences beat one real edit
    expect(nearest('debuG', ['debug', 'debuh'])).toBe('debug');
    expect(distance('ab', 'ba')).toBe(1);
    expect(distance('kitten', 'sitting')).toBe(3);
    expect(distance('', 'abc')).toBe(3);
  });
});

describe('warnings: a budget over its tenant\'s', () => {
  const Gi = 1024 ** 3;
  const Mi = 1024 ** 2;

  it('none for a config without tenant budgets, or with budgets that fit', () => {
    expect(buildConfig(MIN, null).warnings).toEqual([]);
    expect(buildConfig({ ...MIN, tenants: { acme: {} }, homes: { 'acme/p': { profile: 'home' } } }, null).warnings).toEqual([]);
    // home is 2 GiB: a 2 GiB tenant budget is not exceeded
    expect(buildConfig({ ...MIN, tenants: { acme: { maxBytes: '2G' } } }, null).warnings).toEqual([]);
    // posix has no budget (0 = off): the tenant's is the only one, as meant
    expect(buildConfig({ ...MIN, defaultProfile: 'posix', tenants: { acme: { maxBytes: '1G' } } }, null).warnings).toEqual([]);
  });

  it("the tenant's default profile, once for the tenant", () => {
    const l = buildConfig({ ...MIN, tenants: { acme: { maxBytes: '1G' } }, homes: { 'acme/p': {}, 'acme/q': { profile: 'home' } } }, null);
    expect(l.warnings).toEqual([
      {
        path: 'tenants.acme',
        message:
          'homes of this tenant get profile "home" by default, whose budget of 2.0 GiB (2147483648 bytes) exceeds the tenant\'s budget of 1.0 GiB (1073741824 bytes) (tenants.acme.maxBytes): the tenant\'s budget is reached first',
        tenant: 'acme',
        profile: 'home',
        budget: 2 * Gi,
        tenantBudget: Gi,
      },
    ]);
    expect(Object.isFrozen(l.warnings)).toBe(true);
  });

  it("a home whose own profile exceeds its tenant's budget, with the tenant's own default profile", () => {
    const l = buildConfig(
      {
        ...MIN,
        profiles: { big: { extends: 'home', maxHomeBytes: '10G' }, small: { extends: 'scratch' } },
        tenants: { acme: { maxBytes: '5G', defaultProfile: 'small' }, other: { maxBytes: '20G' } },
        homes: { 'acme/huge': { profile: 'big' }, 'acme/fine': { profile: 'home' }, 'other/huge': { profile: 'big' }, 'free/huge': { profile: 'big' } },
      },
      null,
    );
    expect(l.warnings).toHaveLength(1);
    expect(l.warnings[0]).toMatchObject({ path: 'homes.acme/huge', tenant: 'acme', home: 'acme/huge', profile: 'big', budget: 10 * Gi, tenantBudget: 5 * Gi });
    expect(l.warnings[0]!.message).toBe(
      'profile "big" gives this home a budget of 10.0 GiB (10737418240 bytes), which exceeds its tenant\'s budget of 5.0 GiB (5368709120 bytes) (tenants.acme.maxBytes): the tenant\'s budget is reached first',
    );
  });

  it('the global default profile counts for tenants without their own', () => {
    const l = buildConfig({ ...MIN, profiles: { mid: { extends: 'home', maxHomeBytes: 300 * Mi } }, defaultProfile: 'mid', tenants: { a: { maxBytes: '256M' }, b: { maxBytes: '512M' } } }, null);
    expect(l.warnings.map((w) => [w.path, w.profile])).toEqual([['tenants.a', 'mid']]);
  });

  it('an invalid config reports its issues, not warnings', () => {
    expect(issuesOf(() => buildConfig({ ...MIN, tenants: { acme: { maxBytes: '1G', quota: 1 } } }, null))).toEqual(['tenants.acme: Unrecognized key: "quota"']);
  });
});
