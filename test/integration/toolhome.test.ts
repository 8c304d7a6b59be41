import { execFileSync } from 'node:child_process';
import { chownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync, chmodSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, SYSTEM_PATH, canMount, runAs, runAsync, skipReason, startDaemon, type RunResult, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Issue 9: the default `home` profile is a tool home. Real toolchains run
 * unchanged in it as the home's owner, with HOME set to the home, and every
 * test also checks the backing tree: every node belongs to the owner on disk,
 * and nothing has group, other or special bits.
 */

if (!canMount) console.warn(`tool home integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
/** each home's owner (an owner belongs to one home) */
const U = {
  tools: { uid: BASE + 9, gid: BASE + 9 },
  esc: { uid: BASE + 11, gid: BASE + 11 },
  rt: { uid: BASE + 12, gid: BASE + 12 },
  old: { uid: BASE + 13, gid: BASE + 13 },
  ren: { uid: BASE + 14, gid: BASE + 14 },
  sdk: { uid: BASE + 15, gid: BASE + 15 },
  scratch: { uid: BASE + 16, gid: BASE + 16 },
};
type Key = keyof typeof U;
const OTHER = { uid: BASE + 10, gid: BASE + 10 };
const T = 't';
const PY = '/usr/bin/python3';

describe.skipIf(!canMount)('tool homes: real toolchains in the default home profile', () => {
  let d: RunningDaemon;
  let fixtures: string;
  let alias: string;

  const home = (k: string): string => d.home(T, k);
  const backing = (k: string): string => d.backingOf(T, k);
  /** npm's own settings of the test runner (npm test sets npm_config_cache=/root/.npm …) are not the agent's. */
  const noRunnerNpm = Object.fromEntries(Object.keys(process.env).filter((k) => /^npm_/i.test(k)).map((k) => [k, undefined]));
  /** As the owner, in the home, with HOME set to it (what the platform gives an agent). */
  /** a shell script run in the home `k` as its owner */
  const inHome = (k: Key, script: string, timeoutMs = 60_000, env: NodeJS.ProcessEnv = {}): Promise<RunResult> =>
    runAs(U[k].uid, U[k].gid, `cd ${home(k)} && ${script}`, { env: { ...noRunnerNpm, HOME: home(k), ...env }, timeoutMs });
  const asRoot = (script: string): Promise<RunResult> => runAsync('sh', ['-c', script], { env: { PATH: SYSTEM_PATH } });
  const ctl = async (...args: string[]): Promise<Record<string, any>> => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, any>;
  };

  /** Every backing node below (and including) the home: owned by the owner, owner-only bits. */
  function expectBackingClean(k: Key, owner = U[k]): number {
    const bad: string[] = [];
    let n = 0;
    const visit = (p: string): void => {
      const st = lstatSync(p);
      n++;
      if (st.uid !== owner.uid || st.gid !== owner.gid) bad.push(`${p}: owner ${st.uid}:${st.gid}`);
      if (!st.isSymbolicLink() && (st.mode & 0o7077) !== 0) bad.push(`${p}: mode ${(st.mode & 0o7777).toString(8)}`);
      if (st.isDirectory()) for (const e of readdirSync(p)) visit(join(p, e));
    };
    visit(backing(k));
    expect(bad).toEqual([]);
    return n;
  }

  beforeAll(async () => {
    fixtures = mkdtempSync(join(tmpdir(), 'homesfs-toolhome-'));
    chmodSync(fixtures, 0o755);
    alias = join(fixtures, 'home-user');
    d = await startDaemon({
      homes: {
        [`${T}/tools`]: { owner: U.tools },
        [`${T}/other`]: { owner: OTHER },
        [`${T}/esc`]: { owner: U.esc },
        [`${T}/rt`]: { owner: U.rt },
        [`${T}/old`]: { owner: U.old },
        [`${T}/ren`]: { owner: U.ren },
        [`${T}/sdk`]: { owner: U.sdk, profile: 'tool' },
        [`${T}/scratch`]: { owner: U.scratch, profile: 'scratch' },
      },
      // A deployment's profile: the built-in home, seen at another path in its tool container.
      config: { profiles: { tool: { extends: 'home', homeAliases: [alias] } } },
      create: [`${T}/tools`, `${T}/other`, `${T}/esc`, `${T}/rt`, `${T}/old`, `${T}/ren`, `${T}/sdk`, `${T}/scratch`],
    });
    // The tool container's view: its HOME path leads to the home on the mount.
    symlinkSync(home('sdk'), alias);
    for (const k of ['tools', 'esc', 'rt', 'sdk', 'scratch', 'ren'] as const) chownSync(backing(k), U[k].uid, U[k].gid);
    chownSync(backing('other'), OTHER.uid, OTHER.gid);
    writeFileSync(join(backing('other'), 'secret'), 'the other home\n', { mode: 0o600 });
    chownSync(join(backing('other'), 'secret'), OTHER.uid, OTHER.gid);
  });

  afterAll(async () => {
    await d?.stop();
    if (fixtures) rmSync(fixtures, { recursive: true, force: true });
  });

  describe('symbolic links', () => {
    it('links that stay inside work: relative, into the home by its own path, into system trees', async () => {
      const r = await inHome(
        'tools',
        `mkdir -p lib/pkg && echo data > lib/pkg/f && ln -s lib lib64 && cat lib64/pkg/f && ` +
          `mkdir -p node_modules/.bin && ln -s ../pkg/cli.js node_modules/.bin/cli && readlink node_modules/.bin/cli && ` +
          `ln -s "$HOME/lib/pkg/f" abs && cat abs && ln -s ${PY} py && ./py -c 'print("py ok")' && ln -s /usr/bin sysbin && ls sysbin/ | grep -qx sh && echo sys ok && ` +
          `mkdir -p a/b && ln -s ../../lib/pkg/f a/b/up && cat a/b/up`,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('data\n../pkg/cli.js\ndata\npy ok\nsys ok\ndata\n');
      expect(lstatSync(join(backing('tools'), 'lib64')).isSymbolicLink()).toBe(true);
      expectBackingClean('tools');
    });

    it('escaping links are refused at creation (EPERM), as the owner and as root, and nothing is left', async () => {
      const targets = ['/etc/shadow', '../../other/secret', '../other/secret', `${home('other')}/secret`, '/usr/../etc/shadow', 'lib/../../other/secret', `${d.mount}/${T}/tools-not/x`];
      const script = targets.map((t, i) => `ln -s '${t}' e${i} 2>&1; echo "rc=$?"`).join('; ');
      for (const run of [() => inHome('esc', script), () => asRoot(`cd ${home('esc')} && ${script}`)]) {
        const r = await run();
        const lines = r.stdout.trim().split('\n');
        expect(lines.filter((l) => /Operation not permitted/.test(l))).toHaveLength(targets.length);
        expect(lines.filter((l) => l === 'rc=1')).toHaveLength(targets.length);
      }
      for (let i = 0; i < targets.length; i++) expect(existsSync(join(backing('esc'), `e${i}`))).toBe(false);
      const w = await d.waitForLog((l) => l.level === 'warn' && l.home === `${T}/esc` && l.code === 'OP_REFUSED' && l.op === 'symlink');
      expect(w.msg).toBeDefined();
    });

    it('a legal link made escaping by a move answers EACCES when followed, as the owner and as root', async () => {
      // a/b/l -> ../../other/secret is this home's own other/secret; after `mv a/b b` the same
      // target would climb to the tenant level and reach the other home's secret.
      let r = await inHome('esc', `mkdir -p a/b other && echo mine > other/secret && ln -s ../../other/secret a/b/l && cat a/b/l && mv a/b b && echo moved`);
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('mine\nmoved\n');
      const probe = `cd ${home('esc')}; cat b/l 2>&1; echo "rc=$?"; readlink -v b/l 2>&1; echo "rc=$?"; cat b/l/x 2>&1; echo "rc=$?"`;
      for (const run of [() => runAs(U.esc.uid, U.esc.gid, probe, { env: { HOME: home('esc') } }), () => asRoot(probe)]) {
        r = await run();
        expect(r.stdout).not.toContain('the other home');
        expect(r.stdout.match(/Permission denied/g)?.length).toBe(3);
        expect(r.stdout.match(/rc=1/g)?.length).toBe(3);
      }
      await d.waitForLog((l) => l.level === 'warn' && l.home === `${T}/esc` && l.code === 'SYMLINK_ESCAPES');
      // Moved back to where it was made, it leads inside again.
      r = await inHome('esc', `mkdir -p a && mv b a/b && cat a/b/l`);
      expect(r.stdout).toBe('mine\n');
      expectBackingClean('esc');
    });

    it('absolute links follow the home\'s path as it is now: after a rename the old path leads out (EACCES)', async () => {
      let r = await inHome('ren', `echo here > f && ln -s "$HOME/f" abs && ln -s f rel && cat abs rel`);
      expect(r.stdout).toBe('here\nhere\n');
      await ctl('rename-project', '--tenant', T, 'ren', 'ren2');
      const h2 = join(d.mount, T, 'ren2');
      r = await runAs(U.ren.uid, U.ren.gid, `cd ${h2} && cat rel && cat abs 2>&1; echo "rc=$?"`, { env: { HOME: h2 } });
      expect(r.stdout).toMatch(/^here\n.*Permission denied\nrc=1\n$/);
      expect(lstatSync(join(d.backing, T, 'ren2', 'abs')).isSymbolicLink()).toBe(true);
    });

    it('scratch keeps refusing every link (EPERM)', async () => {
      const r = await inHome('scratch', `echo t > f && ln -s f l 2>&1; echo "rc=$?"; ln -s ${PY} p 2>&1; echo "rc=$?"`);
      expect(r.stdout.match(/Operation not permitted/g)?.length).toBe(2);
      expect(existsSync(join(backing('scratch'), 'l'))).toBe(false);
    });
  });

  describe('toolchains', () => {
    it('python3 -m venv, pip install of a local wheel, and its console script', async () => {
      const wheel = join(fixtures, 'hello_homes-1.0-py3-none-any.whl');
      // A minimal wheel with a console script, built with the standard library only.
      execFileSync(PY, [
        '-c',
        `
import base64, hashlib, sys, zipfile
files = {
  'hello_homes/__init__.py': 'def main():\\n    print("hello from a venv")\\n',
  'hello_homes-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: hello-homes\\nVersion: 1.0\\n',
  'hello_homes-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: homesfs-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n',
  'hello_homes-1.0.dist-info/entry_points.txt': '[console_scripts]\\nhello-homes = hello_homes:main\\n',
}
record = ''
for name, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()
    record += f'{name},sha256={digest},{len(text.encode())}\\n'
record += 'hello_homes-1.0.dist-info/RECORD,,\\n'
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for name, text in files.items(): z.writestr(name, text)
    z.writestr('hello_homes-1.0.dist-info/RECORD', record)
`,
        wheel,
      ]);
      chmodSync(wheel, 0o644);
      const r = await inHome(
        'tools',
        `${PY} -m venv .venv && . .venv/bin/activate && pip --version | cut -d' ' -f1 && ` +
          `pip install -q --no-index --disable-pip-version-check ${wheel} && hello-homes && ` +
          `pip install -q --no-index --disable-pip-version-check --force-reinstall /usr/share/python-wheels/pip-*.whl && pip --version | cut -d' ' -f1 && ` +
          `readlink .venv/bin/python && stat -c '%a' .venv/bin/hello-homes && test -x .venv/bin/hello-homes && test -L .venv/lib64 && echo ok`,
        180_000,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toMatch(/^pip\nhello from a venv\npip\n.*python3?\n700\nok\n$/);
      expectBackingClean('tools');
    }, 240_000);

    it('npm init and npm install of a local package with a bin, then npx', async () => {
      const pkg = join(fixtures, 'npm', 'package');
      mkdirSync(pkg, { recursive: true });
      writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'hello-homes', version: '1.0.0', bin: { 'hello-homes': 'cli.js' } }));
      writeFileSync(join(pkg, 'cli.js'), '#!/usr/bin/env node\nconsole.log("hello from npx");\n');
      const tgz = join(fixtures, 'hello-homes-1.0.0.tgz');
      execFileSync('tar', ['-czf', tgz, '-C', join(fixtures, 'npm'), 'package']);
      execFileSync('chmod', ['-R', 'a+rX', fixtures]);
      const r = await inHome(
        'tools',
        `mkdir app && cd app && npm init -y >/dev/null && npm install --offline --no-audit --no-fund --loglevel=error ${tgz} >/dev/null && ` +
          `npx --offline hello-homes && readlink node_modules/.bin/hello-homes && ./node_modules/.bin/hello-homes`,
        120_000,
        { NPM_CONFIG_UPDATE_NOTIFIER: 'false' },
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('hello from npx\n../hello-homes/cli.js\nhello from npx\n');
      expect(lstatSync(join(backing('tools'), 'app/node_modules/hello-homes/cli.js')).mode & 0o777).toBe(0o700);
      expectBackingClean('tools');
    }, 180_000);

    it('git clone of a repository with a symlink and an executable: status clean, commit, gc', async () => {
      const src = join(fixtures, 'src-repo');
      mkdirSync(src);
      // made by the owner of the home it is cloned into
      chownSync(src, U.tools.uid, U.tools.gid);
      const git = `GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x`;
      let r = await runAs(
        U.tools.uid,
        U.tools.gid,
        `cd ${src} && git init -q && echo hi > a.txt && printf '#!/bin/sh\\necho run\\n' > run.sh && chmod +x run.sh && ln -s a.txt link && git add -A && ${git} git commit -qm one && echo ok`,
        { env: { HOME: fixtures } },
      );
      expect(r.stdout).toBe('ok\n');
      r = await inHome(
        'tools',
        `git clone -q ${src} clone && cd clone && git status --porcelain && ./run.sh && readlink link && git config core.filemode && ` +
          `echo more >> a.txt && ${git} git commit -qam two && git gc -q && git status --porcelain && git log --oneline | wc -l && git fsck --no-progress --no-dangling && echo fsck ok`,
        120_000,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('run\na.txt\ntrue\n2\nfsck ok\n');
      expect(lstatSync(join(backing('tools'), 'clone/link')).isSymbolicLink()).toBe(true);
      expect(lstatSync(join(backing('tools'), 'clone/run.sh')).mode & 0o777).toBe(0o700);
      expectBackingClean('tools');
    }, 180_000);

    it('hard links inside one home: one file, its bytes counted once, each name an inode; across homes EXDEV', async () => {
      const usage = async () => {
        const u = await ctl('usage', `${T}/esc`);
        return { bytes: u.bytes as number, inodes: u.inodes as number };
      };
      let r = await inHome('esc', `head -c 5000 /dev/zero > hl-a && echo ok`);
      expect(r.stdout).toBe('ok\n');
      const before = await usage();
      // The new name's attributes are fresh; the old name's may be cached for attrTimeout (README, inode numbers).
      r = await inHome('esc', `ln hl-a hl-b && stat -c '%i' hl-a && stat -c '%i %h' hl-b`);
      const ino = String(lstatSync(join(backing('esc'), 'hl-a')).ino);
      expect(r.stdout).toBe(`${ino}\n${ino} 2\n`);
      // Across homes: no owner reaches two homes (each has its own), so root tries it.
      r = await asRoot(`ln ${home('esc')}/hl-a ${home('tools')}/hl-x 2>&1; echo "rc=$?"`);
      expect(r.stdout).toMatch(/Invalid cross-device link\nrc=1\n$/);
      expect(existsSync(join(backing('tools'), 'hl-x'))).toBe(false);
      expect(await usage()).toEqual({ bytes: before.bytes, inodes: before.inodes + 1 });
      await inHome('esc', `rm hl-a`);
      expect(await usage()).toEqual(before);
      await inHome('esc', `rm hl-b`);
      expect(await usage()).toEqual({ bytes: before.bytes - 5000, inodes: before.inodes - 1 });
    });

    it('a local git clone hard-links its objects and works', async () => {
      const git = `GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x`;
      const r = await inHome(
        'tools',
        `git init -q local && cd local && for i in 1 2 3; do echo $i > f$i; done && git add -A && ${git} git commit -qm one && cd .. && ` +
          `git clone -q local local-clone && cd local-clone && git status --porcelain && cat f3 && echo more >> f1 && ${git} git commit -qam two && git log --oneline | wc -l`,
        120_000,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('3\n2\n');
      // The loose objects of the first commit are shared: one inode under two names.
      const objs = join(backing('tools'), 'local-clone/.git/objects');
      const linked = readdirSync(objs)
        .filter((x) => /^[0-9a-f]{2}$/.test(x))
        .flatMap((x) => readdirSync(join(objs, x)).map((f) => lstatSync(join(objs, x, f))))
        .filter((st) => st.nlink === 2);
      expect(linked.length).toBeGreaterThanOrEqual(3);
      expectBackingClean('tools');
    }, 180_000);

    it('make -j4 with a fifo jobserver (or fifos made in the home by parallel recipes)', async () => {
      const fifoStyle = (await runAsync('make', ['--help'])).stdout.includes('jobserver-style');
      const makefile = [
        'J := a b c d e f g h',
        'all: $(J) relay',
        '\t@cat $(J:%=out.%) | sort | tr -d "\\n"; echo',
        '$(J):',
        '\t@echo $@ > out.$@',
        // Two recipes meet through a FIFO in the home, as a jobserver's clients do.
        'relay:',
        '\t@rm -f q && mkfifo q && { cat q > got & echo through-fifo > q; wait; } && cat got',
        '',
      ].join('\n');
      writeFileSync(join(fixtures, 'Makefile'), makefile, { mode: 0o644 });
      const r = await inHome(
        'tools',
        `mkdir -p mk tmp && cp ${fixtures}/Makefile mk/ && cd mk && TMPDIR=$HOME/tmp make -s -j4 ${fifoStyle ? '--jobserver-style=fifo' : ''} && stat -c %F q`,
        60_000,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout.split('\n').sort().join('\n')).toBe(['', 'abcdefgh', 'fifo', 'through-fifo'].sort().join('\n'));
      expect(lstatSync(join(backing('tools'), 'mk/q')).isFIFO()).toBe(true);
      expectBackingClean('tools');
    }, 90_000);

    it('ssh-agent -a with its socket in the home, and ssh-add through it; python socket.bind', async () => {
      // ssh-keygen needs a passwd entry for the uid; the key is made outside and copied in, as a deployment would.
      execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 't', '-f', join(fixtures, 'id_ed25519')]);
      chmodSync(join(fixtures, 'id_ed25519'), 0o644);
      const r = await inHome(
        'tools',
        `mkdir -p .ssh && chmod 700 .ssh && cp ${fixtures}/id_ed25519 .ssh/ && ` +
          `eval "$(ssh-agent -s -a $HOME/.ssh/agent.sock)" >/dev/null && stat -c %F .ssh/agent.sock && ` +
          `ssh-add -q .ssh/id_ed25519 && ssh-add -l | cut -d' ' -f3 && ssh-agent -k >/dev/null && ` +
          `${PY} -c "import socket,os; s=socket.socket(socket.AF_UNIX); s.bind('py.sock'); s.listen(); c=socket.socket(socket.AF_UNIX); c.connect('py.sock'); a,_=s.accept(); c.sendall(b'ping'); print(a.recv(4).decode())"`,
        60_000,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('socket\nt\nping\n');
      expect(lstatSync(join(backing('tools'), 'py.sock')).isSocket()).toBe(true);
      expect(lstatSync(join(backing('tools'), '.ssh/id_ed25519')).mode & 0o777).toBe(0o600);
      expectBackingClean('tools');
    }, 90_000);

    it('an sdkman-like layout: versions, absolute current links (own path and a declared alias), bin/ on PATH', async () => {
      const exe = (path: string, says: string): string => `mkdir -p $(dirname ${path}) && printf '#!/bin/sh\\necho ${says}\\n' > ${path} && chmod 755 ${path}`;
      const layout =
        `${exe('.sdkman/candidates/java/21.0.1/bin/java', 'java-21')} && ${exe('.sdkman/candidates/java/17.0.9/bin/java', 'java-17')} && ` +
        `${exe('.sdkman/candidates/maven/3.9.6/bin/mvn', 'maven-3.9.6')} && ` +
        `ln -s "$HOME/.sdkman/candidates/java/21.0.1" .sdkman/candidates/java/current && ` +
        `ln -s "${alias}/.sdkman/candidates/maven/3.9.6" .sdkman/candidates/maven/current && ` +
        `java && mvn && ln -sfn "$HOME/.sdkman/candidates/java/17.0.9" .sdkman/candidates/java/current && java`;
      const r = await inHome('sdk', layout, 60_000, {
        PATH: `${home('sdk')}/.sdkman/candidates/java/current/bin:${home('sdk')}/.sdkman/candidates/maven/current/bin:${SYSTEM_PATH}`,
      });
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('java-21\nmaven-3.9.6\njava-17\n');
      // The alias is the deployment's, not any path: outside the alias list it is refused.
      const bad = await inHome('tools', `ln -s "${alias}/x" viaalias 2>&1; echo "rc=$?"`);
      expect(bad.stdout).toMatch(/Operation not permitted\nrc=1\n$/);
      expectBackingClean('sdk');
    }, 120_000);

    it('after venv, pip, npm, git, make and the rest: every ledger equals its tree (no rescan drift), with the unlinks done in the binding', async () => {
      // pip, npm and git remove their temporary files and loose objects; the binding
      // unlinks the closed ones (fuse.nativeUnlink) and the ledger takes what they freed.
      const st = (await ctl('status')) as { native: { fastPath: { unlinkAnswered: number; readdirAnswered: number } } };
      expect(st.native.fastPath.unlinkAnswered).toBeGreaterThan(0);
      expect(st.native.fastPath.readdirAnswered).toBeGreaterThan(0);
      // The homes written only through the mount (`other` and `old` get files placed in
      // their backing behind the daemon, on purpose, by other tests).
      for (const k of ['tools', 'esc', 'rt', 'sdk', 'scratch']) {
        const r = await ctl('rescan', `${T}/${k}`);
        expect(r.drift, k).toEqual({ bytes: 0, inodes: 0 });
      }
    }, 120_000);
  });

  describe('ownership on disk', () => {
    it('set-profile posix and back leaves a home full of files usable by its owner', async () => {
      let r = await inHome(
        'rt',
        `mkdir -p src/deep && for i in 1 2 3; do echo $i > src/deep/f$i; done && printf '#!/bin/sh\\necho tool\\n' > t.sh && chmod +x t.sh && ln -s src/deep/f1 l && echo ok`,
      );
      expect(r.stdout).toBe('ok\n');
      expectBackingClean('rt');
      await ctl('set-profile', `${T}/rt`, 'posix');
      r = await inHome('rt', `cat src/deep/f2 l && ./t.sh && echo new > src/new && mkdir nd && echo x >> src/deep/f3 && rm src/deep/f1 && stat -c '%u %a' src/new t.sh`);
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe(`2\n1\ntool\n${U.rt.uid} 644\n${U.rt.uid} 700\n`);
      // posix: the creating caller owns new nodes on disk.
      expect(lstatSync(join(backing('rt'), 'src/new')).uid).toBe(U.rt.uid);
      await ctl('set-profile', `${T}/rt`, '--clear');
      r = await inHome('rt', `cat src/new src/deep/f3 && ./t.sh && echo again > src/new && rm -r nd && stat -c '%a' src/new`);
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('new\n3\nx\ntool\n600\n');
      // posix wrote 0644 on disk: a rescan puts the home back to owner-only bits.
      const scan = await ctl('rescan', `${T}/rt`);
      expect(scan.repaired.modes).toBeGreaterThanOrEqual(1);
      expectBackingClean('rt');
    }, 60_000);

    it('rescan repairs a home written by an older version (root-owned, group/other bits)', async () => {
      const b = backing('old');
      mkdirSync(join(b, 'sub'), { mode: 0o755 });
      writeFileSync(join(b, 'sub', 'f'), 'old\n', { mode: 0o644 });
      chmodSync(join(b, 'sub', 'f'), 0o4755);
      symlinkSync('sub/f', join(b, 'l'));
      // A planted link to a file outside: the link itself gets the owner, its target is never touched.
      const victim = join(fixtures, 'victim');
      writeFileSync(victim, 'outside\n', { mode: 0o644 });
      symlinkSync(victim, join(b, 'out'));
      chmodSync(b, 0o750);
      const scan = await ctl('rescan', `${T}/old`);
      expect(scan.repaired).toEqual({ owners: 5, modes: 3 });
      expect([lstatSync(victim).uid, lstatSync(victim).mode & 0o7777]).toEqual([0, 0o644]);
      expectBackingClean('old');
      expect(lstatSync(join(b, 'sub', 'f')).mode & 0o7777).toBe(0o700);
      const r = await inHome('old', `cat l && echo more >> sub/f && ls -n sub | tail -1 | cut -d' ' -f3`);
      expect(r.stdout).toBe(`old\n${U.old.uid}\n`);
      expect((await ctl('rescan', `${T}/old`)).repaired).toEqual({ owners: 0, modes: 0 });
    }, 30_000);
  });
});

