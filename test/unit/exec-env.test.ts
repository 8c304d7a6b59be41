import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildConfig } from '../../src/config/load.js';
import { baseEnv, cwdInHome, envFromDump, identityEnv, parseAssignment, sealedEnv, type Env, type OwnerIdentity } from '../../src/exec/env.js';
import { DEFAULT_EXEC_POLICY, DEFAULT_PATH, ExecPolicySchema } from '../../src/exec/policy.js';
import { findCommand, ownerCommand, resolvedFromReply, rlimitArgs } from '../../src/exec/run.js';
import { groupLine, ownerUserName, passwdLine, USER_NAME_RE } from '../../src/users/names.js';
import { codeOf } from '../helpers/fixtures.js';

const HOME = '/homes/acme/web';
const P = DEFAULT_EXEC_POLICY;
/** An owner the node's NSS knows (git finds its name in the record) */
const OWNER: OwnerIdentity = { name: 'acme-web-12345678' };
const IDENTITY: Env = { USER: 'acme-web-12345678', LOGNAME: 'acme-web-12345678', SHELL: '/bin/bash', EMAIL: 'acme-web-12345678@homes.invalid' };

const REDIRECTED: Env = {
  XDG_CACHE_HOME: `${HOME}/.cache`,
  XDG_CONFIG_HOME: `${HOME}/.config`,
  XDG_DATA_HOME: `${HOME}/.local/share`,
  npm_config_cache: `${HOME}/.npm`,
  PIP_CACHE_DIR: `${HOME}/.cache/pip`,
  GRADLE_USER_HOME: `${HOME}/.gradle`,
  MAVEN_OPTS: `-Dmaven.repo.local=${HOME}/.m2/repository`,
};

describe('sealedEnv: allow-list → PATH, HOME, the owner → redirections → tools file → extras', () => {
  const caller = {
    PATH: '/root/.cargo/bin:/root/.pyenv/shims:/usr/bin:/bin',
    SHELL: '/bin/zsh',
    LOGNAME: 'root',
    EMAIL: 'root@caller.example',
    LANG: 'C.UTF-8',
    LC_ALL: 'C.UTF-8',
    LC_TIME: 'en_GB.UTF-8',
    TERM: 'xterm',
    TZ: 'UTC',
    SECRET_TOKEN: 'hunter2',
    AWS_SECRET_ACCESS_KEY: 'x',
    HOME: '/root',
    XDG_CACHE_HOME: '/root/.cache',
    LCX: 'not LC_*',
    USER: 'root',
    UNSET: undefined,
  };
  const cases: Array<{ name: string; input: Parameters<typeof sealedEnv>[0]; want: Env }> = [
    {
      name: "only allow-listed caller variables, the policy's PATH (never the caller's), HOME, the owner and the redirections",
      input: { callerEnv: caller, home: HOME, policy: P, owner: OWNER },
      want: { LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8', LC_TIME: 'en_GB.UTF-8', TERM: 'xterm', TZ: 'UTC', PATH: DEFAULT_PATH, HOME, ...IDENTITY, ...REDIRECTED },
    },
    {
      name: "the record's shell, and git's name where git would find none",
      input: { callerEnv: { TERM: 'dumb' }, home: HOME, policy: P, owner: { name: 'x-y-1', shell: '/bin/zsh', gitName: 'homesfs acme/web' } },
      want: {
        TERM: 'dumb',
        PATH: DEFAULT_PATH,
        HOME,
        USER: 'x-y-1',
        LOGNAME: 'x-y-1',
        SHELL: '/bin/zsh',
        EMAIL: 'x-y-1@homes.invalid',
        GIT_AUTHOR_NAME: 'homesfs acme/web',
        GIT_COMMITTER_NAME: 'homesfs acme/web',
        ...REDIRECTED,
      },
    },
    {
      name: 'a configured allow-list, redirection list, path, shell and email domain replace the defaults',
      input: {
        callerEnv: caller,
        home: HOME,
        policy: { allowEnv: ['TZ', 'SECRET_*', 'P*'], redirect: { CARGO_HOME: '.cargo' }, path: '/bin', shell: '/bin/sh', emailDomain: 'agents.example.org' },
        owner: OWNER,
      },
      want: { TZ: 'UTC', SECRET_TOKEN: 'hunter2', PATH: '/bin', HOME, USER: OWNER.name, LOGNAME: OWNER.name, SHELL: '/bin/sh', EMAIL: `${OWNER.name}@agents.example.org`, CARGO_HOME: `${HOME}/.cargo` },
    },
    {
      name: 'the tools file result replaces the base (it was sourced on top of it)',
      input: { callerEnv: caller, home: HOME, policy: P, owner: OWNER, toolsEnv: { PATH: `${HOME}/tools/bin:/usr/bin`, HOME, JAVA_HOME: `${HOME}/jdk` } },
      want: { PATH: `${HOME}/tools/bin:/usr/bin`, HOME, JAVA_HOME: `${HOME}/jdk` },
    },
    {
      name: 'extras win over everything, HOME and PATH included',
      input: {
        callerEnv: caller,
        home: HOME,
        policy: P,
        owner: OWNER,
        toolsEnv: { PATH: '/tools', HOME, A: 'tools' },
        extras: { HOME: '/elsewhere', PATH: '/mine', A: 'extra', EMPTY: '' },
      },
      want: { PATH: '/mine', HOME: '/elsewhere', A: 'extra', EMPTY: '' },
    },
    {
      name: 'null toolsEnv (absent or skipped file) keeps the base',
      input: { callerEnv: { PATH: '/p' }, home: HOME, policy: P, owner: OWNER, toolsEnv: null, extras: { X: '1' } },
      want: { PATH: DEFAULT_PATH, HOME, ...IDENTITY, ...REDIRECTED, X: '1' },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      expect(sealedEnv(c.input)).toEqual(c.want);
    });
  }

  it('never passes a caller variable that is not allow-listed, whatever its name', () => {
    const env = baseEnv(caller, HOME, P, OWNER);
    for (const k of ['SECRET_TOKEN', 'AWS_SECRET_ACCESS_KEY', 'LCX', 'UNSET']) expect(env).not.toHaveProperty(k);
    expect([env.HOME, env.PATH, env.USER, env.LOGNAME, env.SHELL, env.EMAIL]).toEqual([HOME, DEFAULT_PATH, OWNER.name, OWNER.name, '/bin/bash', `${OWNER.name}@homes.invalid`]);
  });

  it('identityEnv: no EMAIL with an empty domain, no git name unless needed', () => {
    expect(identityEnv(OWNER, { shell: '/bin/sh', emailDomain: '' })).toEqual({ USER: OWNER.name, LOGNAME: OWNER.name, SHELL: '/bin/sh' });
    expect(identityEnv({ ...OWNER, gitName: 'n' }, P)).toEqual({ ...IDENTITY, GIT_AUTHOR_NAME: 'n', GIT_COMMITTER_NAME: 'n' });
  });

  it('refuses extras that are not variables', () => {
    expect(codeOf(() => sealedEnv({ callerEnv: {}, home: HOME, policy: P, owner: OWNER, extras: { 'A-B': '1' } }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => sealedEnv({ callerEnv: {}, home: HOME, policy: P, owner: OWNER, extras: { A: 'x\0y' } }))).toBe('INVALID_ARGUMENT');
  });
});

describe('parseAssignment (--env)', () => {
  const ok: Array<[string, [string, string]]> = [
    ['A=1', ['A', '1']],
    ['A=', ['A', '']],
    ['A=b=c', ['A', 'b=c']],
    ['_x9=/p:/q', ['_x9', '/p:/q']],
  ];
  for (const [s, want] of ok) it(`accepts ${s}`, () => expect(parseAssignment(s)).toEqual(want));
  for (const s of ['A', '=1', '1A=x', 'A B=1', 'A-B=1', '']) it(`refuses '${s}'`, () => expect(codeOf(() => parseAssignment(s))).toBe('INVALID_ARGUMENT'));
});

describe('envFromDump: what the tools file left', () => {
  const base = { PATH: '/bin', HOME };
  it('takes every K=V record, drops what the shell added by itself', () => {
    const dump = ['PATH=/tools:/bin', `HOME=${HOME}`, 'PWD=/x', 'OLDPWD=/', 'SHLVL=1', '_=/usr/bin/env', 'MULTI=a\nb', 'EQ=a=b', ''].join('\0');
    expect(envFromDump(dump, base)).toEqual({ PATH: '/tools:/bin', HOME, MULTI: 'a\nb', EQ: 'a=b' });
  });
  it('keeps a shell variable the base had, and lets the file unset others', () => {
    expect(envFromDump(['PWD=/y', 'A=1'].join('\0'), { PWD: '/x', HOME })).toEqual({ PWD: '/y', A: '1' });
  });
});

describe('cwdInHome', () => {
  const ok: Array<[string | undefined, string]> = [
    [undefined, HOME],
    ['', HOME],
    ['src', `${HOME}/src`],
    ['./a/../b', `${HOME}/b`],
    [`${HOME}/x`, `${HOME}/x`],
    [HOME, HOME],
  ];
  for (const [cwd, want] of ok) it(`${cwd} → ${want}`, () => expect(cwdInHome(HOME, cwd)).toBe(want));
  for (const cwd of ['..', '../web2', '/homes/acme/web2', '/etc', 'a/../../..', 'x\0y']) {
    it(`refuses ${JSON.stringify(cwd)}`, () => expect(codeOf(() => cwdInHome(HOME, cwd))).toBe('INVALID_ARGUMENT'));
  }
});

describe('the exec policy (config "exec", zod)', () => {
  it('defaults to the documented allow-list and redirections', () => {
    expect(P.allowEnv).toEqual(['LANG', 'LC_*', 'TERM', 'TZ']);
    expect(P.path).toBe('/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
    expect([P.shell, P.emailDomain]).toEqual(['/bin/bash', 'homes.invalid']);
    expect(Object.keys(P.redirect).sort()).toEqual(Object.keys(REDIRECTED).sort());
    expect(P.envFile).toBe('.homesfs/env.sh');
    expect(P.oomScoreAdj).toBe(0);
  });
  const bad: Array<[string, unknown]> = [
    ['a pattern with * inside', { allowEnv: ['A*B'] }],
    ['a name with a dash', { allowEnv: ['A-B'] }],
    ['an absolute redirection', { redirect: { X: '/tmp/cache' } }],
    ['a redirection climbing out', { redirect: { X: '../other/.cache' } }],
    ['a bad variable name', { redirect: { '1X': '.x' } }],
    ['an absolute env file', { envFile: '/etc/profile' }],
    ['an env file outside', { envFile: '../x/env.sh' }],
    ['soft over hard', { rlimits: { nofile: { soft: 10, hard: 5 } } }],
    ['an unknown rlimit', { rlimits: { files: { soft: 1, hard: 1 } } }],
    ['an unknown key', { allow: ['LANG'] }],
    ['PATH on the allow-list (it comes from exec.path)', { allowEnv: ['LANG', 'PATH'] }],
    ['USER on the allow-list', { allowEnv: ['USER'] }],
    ['HOME redirected', { redirect: { HOME: '.h' } }],
    ['SHELL redirected', { redirect: { SHELL: '.sh' } }],
    ['a relative PATH entry', { path: '/usr/bin:bin' }],
    ['an empty PATH entry (the working directory)', { path: '/usr/bin::/bin' }],
    ['a relative shell', { shell: 'bash' }],
    ['an email domain with @', { emailDomain: 'a@b' }],
    ['an email domain with a space', { emailDomain: 'homes .invalid' }],
    ['the old defaultPath', { defaultPath: '/bin' }],
  ];
  for (const [name, input] of bad) it(`refuses ${name}`, () => expect(ExecPolicySchema.safeParse(input).success).toBe(false));
  it('accepts a template redirection and reaches the daemon config with its path in errors', () => {
    expect(ExecPolicySchema.parse({ redirect: { MAVEN_OPTS: '-Xmx1g -Dmaven.repo.local={home}/m2' } }).redirect.MAVEN_OPTS).toContain('{home}');
    expect(ExecPolicySchema.parse({ emailDomain: '', path: '/opt/tools/bin:/usr/bin' })).toMatchObject({ emailDomain: '', path: '/opt/tools/bin:/usr/bin' });
    expect(() => buildConfig({ backing: '/b', mount: '/m', exec: { allowEnv: ['PATH'] } }, null)).toThrow(/exec\.allowEnv\.0.*never from the caller/);
    expect(() => buildConfig({ backing: '/b', mount: '/m', exec: { redirect: { X: '/abs' } } }, null)).toThrow(/exec\.redirect\.X/);
    expect(buildConfig({ backing: '/b', mount: '/m' }, null).config.exec).toEqual(P);
  });
});

describe('a resolve reply', () => {
  const reply = { tenant: 'acme', scope: 'project', key: 'web', home: HOME, owner: { uid: 200001, gid: 200001 }, created: false, source: 'default', userName: 'acme-web-12345678' };
  it("takes the daemon's exec policy, or the defaults when it sent none", () => {
    expect(resolvedFromReply({ ...reply, exec: { ...P, emailDomain: 'x.example' } }).exec).toEqual({ ...P, emailDomain: 'x.example' });
    expect(resolvedFromReply(reply).exec).toEqual(P);
  });
  it('reads the policy of a daemon not yet restarted onto this version: defaultPath dropped, PATH off the allow-list', () => {
    const old = { allowEnv: ['PATH', 'LANG', 'LC_*', 'TERM', 'TZ'], redirect: { XDG_CACHE_HOME: '.cache' }, envFile: '.homesfs/env.sh', envFileTimeoutMs: 5000, defaultPath: '/usr/local/bin:/usr/bin:/bin', rlimits: {}, oomScoreAdj: 100 };
    expect(resolvedFromReply({ ...reply, exec: old }).exec).toEqual({ ...P, allowEnv: ['LANG', 'LC_*', 'TERM', 'TZ'], redirect: { XDG_CACHE_HOME: '.cache' }, envFileTimeoutMs: 5000, rlimits: {}, oomScoreAdj: 100 });
  });
  it('refuses a malformed reply with the path of the problem', () => {
    expect(() => resolvedFromReply({ ...reply, exec: { path: 'bin' } })).toThrow(/malformed: exec\.path/);
    expect(() => resolvedFromReply({ ...reply, home: 'rel' })).toThrow(/malformed: home/);
  });
});

describe('the privilege chain', () => {
  it('lowers a hard limit to the caller\'s, keeps soft <= hard', () => {
    const cur = new Map<string, number | 'unlimited'>([['nofile', 20000], ['core', 'unlimited']]);
    expect(rlimitArgs({ rlimits: { nofile: { soft: 1024, hard: 524288 } } }, cur)).toEqual(['--nofile=1024:20000']);
    expect(rlimitArgs({ rlimits: { nofile: { soft: 'unlimited', hard: 'unlimited' } } }, cur)).toEqual(['--nofile=20000:20000']);
    expect(rlimitArgs({ rlimits: { core: { soft: 0, hard: 'unlimited' } } }, cur)).toEqual(['--core=0:unlimited']);
  });
  it('never runs as root, and drops groups, new privileges and capabilities', () => {
    expect(codeOf(() => ownerCommand({ uid: 0, gid: 5 }, P, HOME, ['id']))).toBe('ACCESS_DENIED');
    expect(codeOf(() => ownerCommand({ uid: 5000, gid: 0 }, P, HOME, ['id']))).toBe('ACCESS_DENIED');
    expect(codeOf(() => ownerCommand({ uid: 5000, gid: 5000 }, P, HOME, ['A=B']))).toBe('INVALID_ARGUMENT');
    const argv = ownerCommand({ uid: 5000, gid: 5001 }, P, HOME, ['id', '-u']);
    for (const a of ['--reuid=5000', '--regid=5001', '--clear-groups', '--no-new-privs', '--inh-caps=-all', '--bounding-set=-all']) expect(argv).toContain(a);
    expect(argv.slice(-5)).toEqual(['-C', HOME, '--', 'id', '-u']);
  });
});

describe('findCommand: 127 for nothing found, 126 for found but not executable', () => {
  const dir = mkdtempSync(join(tmpdir(), 'homesfs-findcmd-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'a'));
  mkdirSync(join(dir, 'b'));
  mkdirSync(join(dir, 'a', 'subdir'));
  writeFileSync(join(dir, 'a', 'tool'), '#!/bin/sh\n');
  chmodSync(join(dir, 'a', 'tool'), 0o644);
  writeFileSync(join(dir, 'b', 'tool'), '#!/bin/sh\n');
  chmodSync(join(dir, 'b', 'tool'), 0o755);
  writeFileSync(join(dir, 'a', 'notes'), 'x');
  chmodSync(join(dir, 'a', 'notes'), 0o600);
  const a = join(dir, 'a');
  const b = join(dir, 'b');

  it('finds an executable file, past a non-executable one earlier on PATH (as execvp goes on)', async () => {
    expect(await findCommand('tool', `${a}:${b}`, '/')).toEqual({ found: true });
    expect(await findCommand('sh', '/usr/bin:/bin', '/')).toEqual({ found: true });
    expect(await findCommand('./b/tool', '/nowhere', dir)).toEqual({ found: true });
  });
  it('127 when no candidate exists, naming the PATH searched', async () => {
    expect(await findCommand('no-such-cmd', `${a}:${b}:${dir}/missing`, '/')).toEqual({ found: false, exitStatus: 127, message: `no-such-cmd: command not found (PATH=${a}:${b}:${dir}/missing)` });
    expect(await findCommand('./missing', '/usr/bin', dir)).toMatchObject({ found: false, exitStatus: 127 });
    expect(await findCommand('notes/x', '/usr/bin', a)).toMatchObject({ found: false, exitStatus: 127 }); // ENOTDIR
  });
  it('126 when what exists cannot be executed: no execute bit, a directory', async () => {
    expect(await findCommand('tool', a, '/')).toEqual({ found: false, exitStatus: 126, message: `tool: cannot be run: ${a}/tool is not executable (mode 0644)` });
    expect(await findCommand('./notes', '/usr/bin', a)).toMatchObject({ found: false, exitStatus: 126 });
    expect(await findCommand('subdir', a, '/')).toEqual({ found: false, exitStatus: 126, message: `subdir: cannot be run: ${a}/subdir is a directory` });
  });
  it('an empty PATH entry is the working directory; no PATH is execvp\'s /bin:/usr/bin', async () => {
    expect(await findCommand('tool', ':/nowhere', b)).toEqual({ found: true });
    expect(await findCommand('sh', undefined, '/')).toEqual({ found: true });
  });
});

describe('owner names', () => {
  const homes: Array<[string, string]> = [
    ['acme', 'web'],
    ['acme', '_tenant'],
    ['acme', '_user_alice'],
    ['Acme', 'web'],
    ['a_b', 'c'],
    ['a', 'b_c'],
    ['9lives', 'x'],
    ['ünïcödé', 'prøject'],
    ['a'.repeat(128), 'b'.repeat(128)],
    ['t', '-'],
  ];
  it('are valid user names, unique per home, stable', () => {
    const names = homes.map(([t, k]) => ownerUserName(t, k));
    for (const n of names) {
      expect(n).toMatch(USER_NAME_RE);
      expect(n.length).toBeLessThanOrEqual(31);
    }
    expect(new Set(names).size).toBe(names.length);
    expect(ownerUserName('acme', 'web')).toBe(names[0]);
    expect(names[0]).toMatch(/^acme-web-[0-9a-f]{8}$/);
    expect(names[2]).toMatch(/^acme-user_alice-/);
  });
  it('make passwd and group lines without a login shell', () => {
    const r = { name: 'acme-web-12345678', uid: 200001, gid: 200001, home: 'acme/web', dir: '/home/user' };
    expect(passwdLine(r)).toBe('acme-web-12345678:x:200001:200001:homesfs acme/web:/home/user:/usr/sbin/nologin');
    expect(groupLine(r)).toBe('acme-web-12345678:x:200001:');
    expect(passwdLine({ ...r, home: 'a:b/c,d' })).toBe('acme-web-12345678:x:200001:200001:homesfs a_b/c_d:/home/user:/usr/sbin/nologin');
  });
});
