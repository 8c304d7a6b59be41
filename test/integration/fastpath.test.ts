// The native getattr/lookup fast path (native/src/fastpath/fastpath_attr.c, src/fuse/fastpath.ts)
// must change time, never behaviour. A random tree per profile is lstat'ed
// path by path through a daemon with the fast path and through one without,
// on the same backing, and every field must match.
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, renameSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, type RunningDaemon, rewriteConfig } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownersFrom } from '../helpers/owner-suite.js';

if (!canMount) console.warn(`fastpath integration suite skipped: ${skipReason}`);

const TREE = join(import.meta.dirname, 'fixtures', 'fastpath_tree.py');
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
// Every builtin profile, and one whose presentation is neither "asked" nor "owner".
const HOMES: Record<string, string> = { 't/home': 'home', 't/posix': 'posix', 't/scratch': 'scratch', 't/odd': 'odd' };
/** each home's owner, BASE + 17 and up (an owner belongs to one home), 10 apart: the tree plants files of owner + 1 */
const OWNER = ownersFrom(BASE + 17, Object.keys(HOMES), 10);
/** Longer than scratch's maxNameBytes, within NAME_MAX. */
const LONG_NAME = 'y'.repeat(200);
const PROFILES = { odd: { ...BUILTIN_PROFILES.home, chmod: 'allow', fileMode: 0o640, dirMode: 'asked', allowUserExec: true } };

type FastPathStats = { answered: number; fallbacks: number; homeAnswered: number; fgetattrAnswered: number; readdirAnswered: number; openAnswered: number; openFallbacks: number };
async function fastPathStats(d: RunningDaemon): Promise<FastPathStats | undefined> {
  const s = (await d.status()) as { native: { fastPath?: FastPathStats } };
  return s.native.fastPath;
}

type Row = [string, ...Array<number | string>];

async function lstatAll(paths: string[], mode: 'stat' | 'open' = 'stat'): Promise<Map<string, Row>> {
  const r = await runAsync('python3', [TREE, mode], { input: paths.join('\n') + '\n', timeoutMs: 60_000 });
  expect(r.stderr).toBe('');
  const rows = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Row);
  return new Map(rows.map((row) => [row[0], row]));
}

/** Holds `held` open in every home (through the mount) until the returned function is called. */
async function holdOpen(d: RunningDaemon): Promise<() => Promise<void>> {
  const files = Object.keys(HOMES).map((h) => join(d.mount, h, 'held'));
  const code = `import os,sys\nfds=[os.open(p, os.O_RDWR) for p in sys.argv[1:]]\nprint('open', flush=True)\nsys.stdin.read()\n[os.close(f) for f in fds]`;
  const p = spawn('python3', ['-c', code, ...files], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    p.stdout.once('data', () => resolve());
    p.once('exit', (c) => reject(new Error(`holder exited with ${c}`)));
  });
  return () =>
    new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.stdin.end();
    });
}

describe.skipIf(!canMount)('native getattr fast path: identical answers with and without it', () => {
  let d: RunningDaemon;
  const paths: string[] = [];

  beforeAll(async () => {
    d = await startDaemon({
      create: Object.keys(HOMES),
      homes: Object.fromEntries(Object.entries(HOMES).map(([h, profile]) => [h, { owner: OWNER[h]!, profile }])),
      config: { owners: OWNERS, profiles: PROFILES, fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0, nativeFastPath: true } },
    });
    await d.stopKeep();
    let seed = 1 + Math.floor(Math.random() * 1e6);
    for (const h of Object.keys(HOMES)) {
      const r = await runAsync('python3', [TREE, 'build', d.backingOf(...(h.split('/') as [string, string])), String(seed++), String(OWNER[h]!.uid), String(OWNER[h]!.gid)]);
      expect(r.stderr).toBe('');
      const m = join(d.mount, h);
      for (const rel of r.stdout.trim().split('\n')) paths.push(join(m, rel));
      // A name within NAME_MAX but past scratch's maxNameBytes (128), on the backing of every home: refused there, served elsewhere.
      // Its atime an hour ahead, as the tree's (relatime never moves it: the open pass reads it).
      const long = join(d.backingOf(...(h.split('/') as [string, string])), LONG_NAME);
      writeFileSync(long, 'long');
      utimesSync(long, Date.now() / 1000 + 3600, Date.now() / 1000 - 1);
      // names that do not exist, that only JS knows, or that lead through a file or a symlink
      for (const rel of ['', 'nope', 'd0/nope', 'f0/x', 'held/x', '.homesfs/status', '.homesfs/nope', 'sl4/x', 'x'.repeat(300), LONG_NAME, `${LONG_NAME}/x`, '.fuse_hidden0000000100000002', 'd0/../f1']) {
        paths.push(rel === '' ? m : `${m}/${rel}`);
      }
    }
    paths.push(d.mount, join(d.mount, 't'), join(d.mount, 'nope'), join(d.mount, 't', 'nope'));
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
  });

  it('answers every path of a random tree per profile exactly as JavaScript does, open files included', async () => {
    const runs: Array<Map<string, Row>> = [];
    for (const fast of [true, false]) {
      rewriteConfig(d, (c) => ((c.fuse as Record<string, unknown>).nativeFastPath = fast));
      d = await startDaemon({ dir: d.dir });
      for (const h of Object.keys(HOMES)) writeFileSync(join(d.backing, h, 'held'), 'h'.repeat(5000));
      const release = await holdOpen(d);
      // Behind the daemon's back: the charged size (5000) is what the mount shows while the file is open.
      for (const h of Object.keys(HOMES)) truncateSync(join(d.backing, h, 'held'), 100);
      runs.push(await lstatAll(paths));
      // Every path opened read-only (the regular files natively, once the stat pass's opens got
      // this caller slots): the same errno, the same bytes, the same attributes by handle.
      for (const [p, row] of await lstatAll(paths, 'open')) runs[runs.length - 1]!.set(p, row);
      await release();
      // Created through the mount: the create's attributes and fstat of the new descriptor (fgetattr).
      for (const h of Object.keys(HOMES)) {
        const r = await runAsync('python3', [TREE, 'create', join(d.mount, h), '6']);
        expect(r.stderr).toBe('');
        for (const line of r.stdout.trim().split('\n')) {
          const [name, ...rest] = JSON.parse(line) as [string, ...unknown[]];
          // ino and times differ between the two runs (new files): mode, uid, gid, size, nlink are compared
          const cut = rest.map((x) => (Array.isArray(x) ? x.slice(0, 5) : x));
          runs[runs.length - 1]!.set(name, [name, JSON.stringify(cut)]);
          if (Array.isArray(rest[0])) {
            const [afterCreate, afterWrite, byName] = rest as number[][];
            // fstat right after the create and lstat by name agree on everything but size and times
            expect(afterCreate!.slice(0, 3).concat(afterCreate!.slice(4, 6)), name).toEqual(byName!.slice(0, 3).concat(byName!.slice(4, 6)));
            expect(afterWrite![3], name).toBe(byName![3]);
          }
        }
        await runAsync('sh', ['-c', `rm -f ${join(d.backing, h)}/new-*`]);
      }
      const stats = await fastPathStats(d);
      if (fast) {
        // The run did exercise the native path (and handed the rest to JS).
        expect(stats!.answered).toBeGreaterThan(paths.length / 2);
        expect(stats!.fallbacks).toBeGreaterThan(0);
        expect(stats!.fgetattrAnswered).toBeGreaterThan(20);
        expect(stats!.readdirAnswered).toBeGreaterThan(10);
        // Read-only opens in the three binary homes, answered natively; the text home's and the odd cases went to JS.
        expect(stats!.openAnswered).toBeGreaterThan(30);
        expect(stats!.openFallbacks).toBeGreaterThan(0);
      } else {
        expect(stats).toBeUndefined();
      }
      await d.stopKeep();
    }
    const [fast, js] = runs as [Map<string, Row>, Map<string, Row>];
    expect([...fast.keys()].sort()).toEqual([...js.keys()].sort());
    expect(fast.size).toBeGreaterThan(paths.length + 24);
    let compared = 0;
    for (const p of fast.keys()) {
      let a = fast.get(p)!;
      let b = js.get(p)!;
      const rel = p.replace(/^(fstat|create|list|open):/, '').slice(d.mount.length).split('/').length;
      // Times of the rewritten file and of the daemon's own levels are not the tree's;
      // the status file is made up by JS at each start (its text says when).
      const keep = p.endsWith('/.homesfs/status') ? 4 : p.endsWith('/held') || rel < 4 ? 7 : a.length;
      a = a.slice(0, keep) as Row;
      b = b.slice(0, keep) as Row;
      // The status file's text says when it was made: its open rows compare everything but the digest.
      if (p.startsWith('open:') && p.endsWith('/.homesfs/status') && a.length > 2) {
        a = [a[0], a[2]!] as Row;
        b = [b[0], b[2]!] as Row;
      }
      expect(a, p).toEqual(b);
      compared++;
    }
    expect(compared).toBe(fast.size);
    for (const h of Object.keys(HOMES)) {
      const held = fast.get(join(d.mount, h, 'held'))!;
      expect(held[4], `${h}/held size`).toBe(5000);
    }
    // The differences the profiles make are visible (the comparison is not of two empty answers).
    const modes = new Set([...fast.values()].filter((r) => r.length > 2).map((r) => r[1]));
    expect(modes.size).toBeGreaterThan(8);
  }, 180_000);
});

/** A process holding a file open in the mount: `ask()` answers "mode uid gid size" as the daemon gives them by handle (fgetattr). */
function handleProbe(file: string): { ask(): Promise<string>; stop(): void } {
  const p = spawn('python3', [TREE, 'hold', file], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: p.stdout });
  return {
    ask: () =>
      new Promise((resolve) => {
        lines.once('line', (l) => resolve(l.trim()));
        p.stdin.write('\n');
      }),
    stop: () => p.kill('SIGKILL'),
  };
}

/** A process working inside a home: lstat()s names relative to its cwd on request (size, or the errno name). */
function cwdProbe(cwd: string): { ask(name: string): Promise<string>; stop(): void } {
  const code = `import os,sys,errno\nfor l in sys.stdin:\n  n=l.rstrip('\\n')\n  try: print(os.lstat(n).st_size, flush=True)\n  except OSError as e: print(errno.errorcode[e.errno], flush=True)`;
  const p = spawn('python3', ['-c', code], { cwd, stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting: Array<(s: string) => void> = [];
  let buf = '';
  p.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      waiting.shift()?.(line);
    }
  });
  return {
    ask: (name) =>
      new Promise((resolve) => {
        waiting.push(resolve);
        p.stdin.write(`${name}\n`);
      }),
    stop: () => p.kill('SIGKILL'),
  };
}

describe.skipIf(!canMount)('native getattr fast path: every policy change takes effect on the next request', () => {
  let d: RunningDaemon;
  /** each home's owner (an owner belongs to one home) */
  const PO = ownersFrom<string>(BASE + 17, ['t/prof', 't/own', 't/hup', 't/rep', 't/root']);
  /** the owner a reload gives t/own */
  const O2 = { uid: BASE + 29, gid: BASE + 31 };
  /** the uid and gid of files planted in the backing tree: no home's owner, what posix presents as is */
  const OTHER = { uid: BASE + 40, gid: BASE + 41 };
  const probes: Array<{ stop(): void }> = [];

  const ctl = async (...args: string[]) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return r.stdout;
  };
  /** `stat -c` of a path in the mount (as root), or the error */
  const stat = async (rel: string, fmt = '%a %u %g %s'): Promise<string> => {
    const r = await runAsync('stat', ['-c', fmt, join(d.mount, rel)]);
    return r.code === 0 ? r.stdout.trim() : r.stderr.includes('No such file') ? 'ENOENT' : r.stderr.trim();
  };
  const answered = async () => (await fastPathStats(d))!.answered;
  /** The answer came from the native path: stat twice and see its count move. */
  const nativeStat = async (rel: string): Promise<string> => {
    const before = await answered();
    const s = await stat(rel);
    expect(await answered(), `${rel} answered natively`).toBeGreaterThan(before);
    return s;
  };
  const plant = (home: string, name: string, mode: number, owner: { uid: number; gid: number }, bytes = 10) => {
    const p = join(d.backing, home, name);
    writeFileSync(p, 'x'.repeat(bytes));
    chownSync(p, owner.uid, owner.gid);
    chmodSync(p, mode);
  };

  beforeAll(async () => {
    d = await startDaemon({
      create: ['t/prof', 't/own', 't/hup', 't/rep', 't/root'],
      homes: { 't/prof': { owner: PO['t/prof']! }, 't/own': { owner: PO['t/own']! }, 't/hup': { owner: PO['t/hup']! }, 't/rep': { owner: PO['t/rep']! }, 't/root': { owner: PO['t/root']! } },
      config: { owners: OWNERS, fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0 } },
    });
    for (const h of ['t/prof', 't/own', 't/hup', 't/rep', 't/root']) {
      chownSync(join(d.backing, h), PO[h]!.uid, PO[h]!.gid);
      plant(h, 'f', 0o4755, OTHER);
    }
  });

  afterAll(async () => {
    for (const p of probes) p.stop();
    await d?.stop();
  });

  it('set-profile, set-budget and dropping the override: the next stat shows the new presentation', async () => {
    const OWNER = PO['t/prof']!;
    const homeView = `700 ${OWNER.uid} ${OWNER.gid} 10`;
    const posixView = `4755 ${OTHER.uid} ${OTHER.gid} 10`;
    // a handle open across the changes (on another file: an open inode's getattr by name is JS's): its fgetattr follows the home's policy too
    plant('t/prof', 'g', 0o4755, OTHER);
    const open = handleProbe(join(d.mount, 't/prof/g'));
    probes.push(open);
    const byHandle = async () => {
      const before = (await fastPathStats(d))!.fgetattrAnswered;
      const s = await open.ask();
      expect((await fastPathStats(d))!.fgetattrAnswered, 'fgetattr answered natively').toBeGreaterThan(before);
      return s;
    };
    expect(await nativeStat('t/prof/f')).toBe(homeView);
    expect(await byHandle()).toBe(homeView);
    await ctl('set-profile', 't/prof', 'posix');
    expect(await nativeStat('t/prof/f')).toBe(posixView);
    expect(await byHandle()).toBe(posixView);
    await ctl('set-budget', 't/prof', '1M');
    expect(await nativeStat('t/prof/f')).toBe(posixView);
    await ctl('set-profile', 't/prof', 'scratch');
    expect(await nativeStat('t/prof/f')).toBe(`600 ${OWNER.uid} ${OWNER.gid} 10`);
    expect(await byHandle()).toBe(`600 ${OWNER.uid} ${OWNER.gid} 10`);
    await ctl('set-profile', 't/prof', '--clear');
    expect(await nativeStat('t/prof/f')).toBe(homeView);
    expect(await byHandle()).toBe(homeView);
    open.stop();
  });

  it('an owner change by SIGHUP reload: the next stat shows the new owner', async () => {
    const OWNER = PO['t/own']!;
    expect(await nativeStat('t/own/f')).toBe(`700 ${OWNER.uid} ${OWNER.gid} 10`);
    rewriteConfig(d, (c) => ((c.homes as Record<string, { owner: unknown }>)['t/own']!.owner = O2));
    const mark = d.logs.length;
    d.proc.kill('SIGHUP');
    await d.waitForLog((l) => l.msg === 'configuration reloaded' && d.logs.indexOf(l) >= mark);
    expect(await nativeStat('t/own/f')).toBe(`700 ${O2.uid} ${O2.gid} 10`);
  });

  it('a profile change by SIGHUP reload: the next stat shows the new profile', async () => {
    const OWNER = PO['t/hup']!;
    expect(await nativeStat('t/hup/f')).toBe(`700 ${OWNER.uid} ${OWNER.gid} 10`);
    rewriteConfig(d, (c) => ((c.homes as Record<string, { profile?: string }>)['t/hup']!.profile = 'posix'));
    const mark = d.logs.length;
    d.proc.kill('SIGHUP');
    await d.waitForLog((l) => l.msg === 'configuration reloaded' && d.logs.indexOf(l) >= mark);
    expect(await nativeStat('t/hup/f')).toBe(`4755 ${OTHER.uid} ${OTHER.gid} 10`);
  });

  it('rename-project: the old path is gone, the new one is served (natively), a new home under the old name is its own', async () => {
    await ctl('settings', 'set', '--tenant', 't', '--project', 'ren', 'project');
    await ctl('resolve', '--tenant', 't', '--project', 'ren');
    const owner = JSON.parse(await ctl('--json', 'usage', 't/ren')).owner as { uid: number; gid: number };
    plant('t/ren', 'f', 0o644, owner, 3);
    expect(await nativeStat('t/ren/f')).toBe(`600 ${owner.uid} ${owner.gid} 3`);
    await ctl('rename-project', '--tenant', 't', 'ren', 'ren2');
    expect(await stat('t/ren/f')).toBe('ENOENT');
    expect(await nativeStat('t/ren2/f')).toBe(`600 ${owner.uid} ${owner.gid} 3`);
    await ctl('release-name', 't/ren');
    await ctl('resolve', '--tenant', 't', '--project', 'ren');
    expect(await stat('t/ren/f')).toBe('ENOENT');
    expect(await nativeStat('t/ren2/f')).toBe(`600 ${owner.uid} ${owner.gid} 3`);
  });

  it('delete-project then recreate: a process still inside sees nothing of the old home', async () => {
    await ctl('settings', 'set', '--tenant', 't', '--project', 'del', 'project');
    await ctl('resolve', '--tenant', 't', '--project', 'del');
    const owner = JSON.parse(await ctl('--json', 'usage', 't/del')).owner as { uid: number; gid: number };
    plant('t/del', 'f', 0o644, owner, 3);
    const inside = cwdProbe(join(d.mount, 't', 'del'));
    probes.push(inside);
    expect(await inside.ask('f')).toBe('3');
    expect(await nativeStat('t/del/f')).toBe(`600 ${owner.uid} ${owner.gid} 3`);
    await ctl('delete-project', '--tenant', 't', 'del', '--force');
    expect(await inside.ask('f')).toBe('ENOENT');
    expect(await stat('t/del/f')).toBe('ENOENT');
    await ctl('resolve', '--tenant', 't', '--project', 'del');
    expect(await stat('t/del/f')).toBe('ENOENT');
    expect(await inside.ask('f')).toBe('ENOENT');
    const again = JSON.parse(await ctl('--json', 'usage', 't/del')).owner as { uid: number; gid: number };
    plant('t/del', 'g', 0o644, again, 4);
    expect(await nativeStat('t/del/g')).toBe(`600 ${again.uid} ${again.gid} 4`);
  });

  it("a home's own getattr: answered natively while the daemon's last check of its directory stands (a second), then the daemon's again", async () => {
    const OWNER = PO['t/root']!;
    const home = join(d.mount, 't', 'root');
    const homeAnswered = async () => (await fastPathStats(d))!.homeAnswered;
    // Inside the home (as root): a stat of "." asks the daemon about the home itself.
    const inside = cwdProbe(home);
    probes.push(inside);
    expect(await inside.ask('.')).toMatch(/^\d+$/);
    const n0 = await homeAnswered();
    // 200 creates in the home's own directory, each followed by a stat of the home.
    const r = await runAs(OWNER.uid, OWNER.gid, `cd ${home} && python3 -c 'import os
seen=set()
for i in range(200):
  os.close(os.open("r%03d" % i, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600)); s=os.stat("."); seen.add("%o %d %d" % (s.st_mode, s.st_uid, s.st_gid))
print(" ".join(sorted(seen)))'`);
    expect(r.code, r.stderr).toBe(0);
    // Presented as the daemon presents it: a directory 0700 of the home's owner, every time.
    expect(r.stdout.trim()).toBe(`40700 ${OWNER.uid} ${OWNER.gid}`);
    const n1 = await homeAnswered();
    // All but those that came as a second ran out were the binding's.
    expect(n1 - n0).toBeGreaterThan(150);
    // A second on, the check no longer stands: of the requests a stat of the home brings
    // (with entryTimeout 0, a LOOKUP of it and its GETATTR), the first is the daemon's, which
    // checks again; the next stat's are all the binding's.
    await new Promise((res) => setTimeout(res, 1_100));
    const at = async () => {
      const before = await homeAnswered();
      expect(await inside.ask('.')).toMatch(/^\d+$/);
      return (await homeAnswered()) - before;
    };
    const afterExpiry = await at();
    const within = await at();
    expect(within).toBeGreaterThan(0);
    expect(afterExpiry).toBe(within - 1);
  });

  it('a backing directory moved away behind the daemon: once noticed, nothing of it is served; a new one in its place is', async () => {
    const OWNER = PO['t/rep']!;
    const inside = cwdProbe(join(d.mount, 't', 'rep'));
    probes.push(inside);
    expect(await nativeStat('t/rep/f')).toBe(`700 ${OWNER.uid} ${OWNER.gid} 10`);
    expect(await inside.ask('f')).toBe('10');
    renameSync(join(d.backing, 't', 'rep'), join(d.dir, 'rep-moved'));
    // The daemon re-checks a home's directory at most once a second, on a lookup of the home itself.
    const deadline = Date.now() + 15_000;
    while ((await stat('t/rep')) !== 'ENOENT') {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await inside.ask('f')).toBe('ENOENT');
    expect(await stat('t/rep/f')).toBe('ENOENT');
    mkdirSync(join(d.backing, 't', 'rep'), { mode: 0o700 });
    chownSync(join(d.backing, 't', 'rep'), OWNER.uid, OWNER.gid);
    plant('t/rep', 'f', 0o600, OWNER, 6);
    while ((await stat('t/rep/f')) !== `600 ${OWNER.uid} ${OWNER.gid} 6`) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await nativeStat('t/rep/f')).toBe(`600 ${OWNER.uid} ${OWNER.gid} 6`);
  });
});
