import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Issue 8, item 2: one process of a home's owner raises its own RLIMIT_NOFILE
 * and opens one file thousands of times. On the old code the daemon's
 * descriptors ran out: other homes answered "Too many open files", `homesctl
 * status` failed, the probe could not spawn `stat` and the daemon exited with
 * a dead mount. Now each home (and uid) stops at its limit with EMFILE, all
 * homes together stop short of the daemon's reserve with ENFILE, and the
 * daemon, the other homes and the control socket keep working.
 *
 * The daemon runs with a small descriptor limit (limits.nofile 4096, reserve
 * 1280) so the attack is quick; uids are this file's own (helpers/owner-ids.ts).
 */

if (!canMount) console.warn(`open-file limits suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const A = { uid: BASE + 1, gid: BASE + 1 }; // the attacker
const V = { uid: BASE + 2, gid: BASE + 2 }; // a victim in another tenant
const U2 = { uid: BASE + 3, gid: BASE + 3 }; // one uid, two processes
const D = { uid: BASE + 4, gid: BASE + 4 };
const NOFILE = 4096;
const RESERVE = 1280;
const TIGHT = 1000;
const PER_UID = 1500;

/**
 * Raise the soft RLIMIT_NOFILE to the hard one, open FILE up to N times (or
 * create NAME-0, NAME-1, … with `create`), report how far it got and the
 * errno, keep trying TRIES more times after the first refusal, then hold
 * everything open until stdin closes.
 */
const OPENER = `
import os, sys, resource, json, errno
path, n, mode, tries = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds, err = [], None
if mode == 'threads':
    # n opens from 32 threads at once: the count at the limit must still be exact
    import threading
    errs, lock = set(), threading.Lock()
    def worker(k):
        for i in range(k, n, 32):
            try:
                fd = os.open(path, os.O_RDONLY)
                with lock: fds.append(fd)
            except OSError as e:
                with lock: errs.add(errno.errorcode[e.errno])
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(32)]
    for t in ts: t.start()
    for t in ts: t.join()
    print(json.dumps({'opened': len(fds), 'err': ','.join(sorted(errs)) or None, 'again': [], 'hard': hard}), flush=True)
    sys.stdin.read()
    for fd in fds: os.close(fd)
    sys.exit(0)
if mode == 'unlinked':
    # n files created, held open and unlinked: each is served by libfuse's hidden name
    for i in range(n):
        name = '%s-%d' % (path, i)
        fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.write(fd, b'x')
        os.unlink(name)
        fds.append(fd)
    st = [os.fstat(fd) for fd in fds]
    os.fchmod(fds[0], 0o400)
    ok = all(s.st_nlink == 0 and s.st_size == 1 for s in st) and (os.fstat(fds[0]).st_mode & 0o777) == 0o400
    print(json.dumps({'opened': len(fds), 'err': None if ok else 'bad fstat', 'again': [], 'hard': hard}), flush=True)
    sys.stdin.read()
    for fd in fds: os.close(fd)
    sys.exit(0)
def one(i):
    if mode == 'create':
        return os.open('%s-%d' % (path, i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    return os.open(path, os.O_RDONLY)
for i in range(n):
    try:
        fds.append(one(i))
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
again = []
for i in range(tries):
    try:
        os.close(one(len(fds) + 1000000 + i))
        again.append('ok')
    except OSError as e:
        again.append(errno.errorcode[e.errno])
print(json.dumps({'opened': len(fds), 'err': err, 'again': sorted(set(again)), 'hard': hard}), flush=True)
sys.stdin.read()
for fd in fds: os.close(fd)
`;

interface Held {
  result: { opened: number; err: string | null; again: string[]; hard: number };
  release(): Promise<number | null>;
}

/** Start the opener as uid/gid and wait for its report; it holds its files until released. */
async function holdOpen(script: string, who: { uid: number; gid: number }, args: string[]): Promise<Held> {
  const p: ChildProcess = spawn('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'python3', script, ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { PATH: SYSTEM_PATH, LANG: 'C.UTF-8' },
  });
  let stderr = '';
  p.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((res) => p.on('exit', (code) => res(code)));
  const line = await new Promise<string>((res, rej) => {
    createInterface({ input: p.stdout! }).once('line', res);
    void exited.then((code) => rej(new Error(`opener exited ${code} before reporting: ${stderr}`)));
  });
  return {
    result: JSON.parse(line) as Held['result'],
    release: async () => {
      p.stdin!.end();
      return exited;
    },
  };
}

interface StatusLimits {
  homes: Array<{ tenant: string; key: string; openFiles: number; maxOpenFiles: number; inodes: number }>;
  mount: { mounted: boolean; lastProbeAt: string | null; lastProbeOk: boolean | null };
  limits: { nofile: { configured: number; soft: number }; reserveFiles: number; openFiles: number; openFilesCap: number; openFilesPerUid: number; descriptorsInUse: number };
}

describe.skipIf(!canMount)('open-file limits (issue 8 item 2)', () => {
  let d: RunningDaemon;
  let scripts: string;
  let opener: string;
  const status = async () => (await d.status()) as unknown as StatusLimits;
  const homeOf = (s: StatusLimits, t: string, k: string) => s.homes.find((h) => h.tenant === t && h.key === k)!;

  /** The victim's own work: create, write, read back, in its own home. */
  async function victimWorks(tag: string): Promise<void> {
    const r = await runAs(
      V.uid,
      V.gid,
      `set -e; cd ${d.home('vic', 'v')}; for i in $(seq 1 20); do echo "${tag} $i" > f-${tag}-$i; done; cat f-${tag}-20; python3 -c "
import os
fds = [os.open('f-${tag}-%d' % i, os.O_RDWR) for i in range(1, 21)]
for fd in fds: os.write(fd, b'more')
for fd in fds: os.close(fd)
print('ok')"`,
    );
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    expect(r.stdout).toBe(`${tag} 20\nok\n`);
  }

  beforeAll(async () => {
    scripts = mkdtempSync(join(tmpdir(), 'homesfs-openfiles-'));
    chmodSync(scripts, 0o755);
    opener = join(scripts, 'opener.py');
    writeFileSync(opener, OPENER, { mode: 0o644 });
    const homes = {
      'atk/a': { owner: A, profile: 'tight' },
      'vic/v': { owner: V },
      'two/b': { owner: U2 },
      'atk/d': { owner: D },
    };
    d = await startDaemon({
      awaitLedgers: true,
      create: Object.keys(homes),
      homes,
      config: {
        limits: { nofile: NOFILE, reserveFiles: RESERVE, openFilesPerUid: PER_UID },
        profiles: { tight: { extends: 'home', maxOpenFiles: TIGHT } },
      },
    });
    await runAs(A.uid, A.gid, `echo x > ${d.home('atk', 'a')}/f`);
    await runAs(U2.uid, U2.gid, `echo x > ${d.home('two', 'b')}/f`);
    await runAs(D.uid, D.gid, `echo x > ${d.home('atk', 'd')}/f`);
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
    rmSync(scripts, { recursive: true, force: true });
  });

  it('the daemon runs with the configured descriptor limit and shows it', async () => {
    const s = await status();
    expect(s.limits.nofile).toMatchObject({ configured: NOFILE, soft: NOFILE });
    expect(readFileSync(`/proc/${d.proc.pid}/limits`, 'utf8')).toMatch(new RegExp(`Max open files\\s+${NOFILE}\\s`));
    expect(s.limits.reserveFiles).toBe(RESERVE);
    // the reserve, and two descriptors per loaded home (its directory's and the binding's copy), are kept out of the homes' reach
    expect(s.limits.openFilesCap).toBe(NOFILE - RESERVE - 2 * s.homes.length);
    expect(s.limits.openFiles).toBe(0);
    expect(homeOf(s, 'atk', 'a').maxOpenFiles).toBe(TIGHT);
    const human = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'status']);
    expect(human.stdout).toMatch(new RegExp(`Descriptors: +\\d+ in use of ${NOFILE} \\(RLIMIT_NOFILE, hard \\d+; limits.nofile ${NOFILE}\\), ${RESERVE} reserved`));
    expect(human.stdout).toMatch(/Open files: +0 of \d+ across all homes; per uid 1500/);
  });

  it("an owner opening one file 20,000 times stops at its home's limit with EMFILE; the others, the socket and the mount carry on", async () => {
    const started = new Date().toISOString();
    const fdsBefore = d.fdCount();
    const atk = await holdOpen(opener, A, [join(d.home('atk', 'a'), 'f'), '20000', 'open', '50']);
    try {
      expect(atk.result.hard).toBeGreaterThan(TIGHT + 100); // it really could have gone on
      expect(atk.result).toMatchObject({ opened: TIGHT, err: 'EMFILE', again: ['EMFILE'] });
      // A create at the limit is refused before anything is made: no file, no inode charged.
      const inodes = homeOf(await status(), 'atk', 'a').inodes;
      const c = await runAs(A.uid, A.gid, `python3 -c "import os; os.open('${d.home('atk', 'a')}/new', os.O_CREAT | os.O_WRONLY, 0o600)" 2>&1; echo rc=$?`);
      // the attacker's descriptors are all in the held process; this one is a new process of the same home
      expect(c.stdout).toMatch(/Too many open files[\s\S]*rc=1/);
      expect(existsSync(join(d.backingOf('atk', 'a'), 'new'))).toBe(false);
      const s = await status();
      expect(homeOf(s, 'atk', 'a')).toMatchObject({ openFiles: TIGHT, inodes });
      expect(s.limits.openFiles).toBe(TIGHT);
      // The daemon holds one descriptor per open file, no more.
      expect(d.fdCount() - fdsBefore).toBeGreaterThanOrEqual(TIGHT);
      expect(d.fdCount() - fdsBefore).toBeLessThan(TIGHT + 50);
      await victimWorks('during');
      // One warn line per burst (rate-limited), with home, op, code and errno.
      await d.waitForLog((l) => l.code === 'OPEN_FILES_EXCEEDED' && l.home === 'atk/a');
      const lines = d.logs.filter((l) => l.code === 'OPEN_FILES_EXCEEDED' && l.home === 'atk/a');
      expect(lines.length).toBeGreaterThanOrEqual(1);
      expect(lines.length).toBeLessThanOrEqual(10);
      expect(lines[0]).toMatchObject({ level: 'warn', op: 'open', errno: 'EMFILE', scope: 'home', limit: TIGHT });
      // The owner can see why, without admin rights.
      const why = await runAs(A.uid, A.gid, `cat ${d.home('atk', 'a')}/.homesfs/status`);
      // (its status file takes no descriptor, so it opens even now)
      expect(why.stdout).toMatch(/OPEN_FILES_EXCEEDED \(EMFILE\)/);
      expect(why.stdout).toMatch(new RegExp(`open files: +${TIGHT} of ${TIGHT} — FULL`));
    } finally {
      expect(await atk.release()).toBe(0);
    }
    // The liveness probe kept passing through all of it, and the handles are all given back.
    expect(d.logs.filter((l) => l.msg === 'mount probe failed' || l.msg === 'mount lost: exiting')).toEqual([]);
    let s = await status();
    for (let i = 0; i < 50 && (s.limits.openFiles !== 0 || (s.mount.lastProbeAt ?? '') < started); i++) {
      await new Promise((r) => setTimeout(r, 200));
      s = await status();
    }
    expect(s.limits.openFiles).toBe(0);
    expect(homeOf(s, 'atk', 'a').openFiles).toBe(0);
    expect(s.mount).toMatchObject({ mounted: true, lastProbeOk: true });
    expect(s.mount.lastProbeAt! >= started).toBe(true);
    expect(d.proc.exitCode).toBeNull();
    await victimWorks('after');
  }, 120_000);

  it('32 threads opening at once get exactly the limit, and every slot comes back', async () => {
    const atk = await holdOpen(opener, A, [join(d.home('atk', 'a'), 'f'), String(TIGHT + 600), 'threads', '0']);
    try {
      expect(atk.result).toMatchObject({ opened: TIGHT, err: 'EMFILE' });
      expect(homeOf(await status(), 'atk', 'a').openFiles).toBe(TIGHT);
    } finally {
      expect(await atk.release()).toBe(0);
    }
    let s = await status();
    for (let i = 0; i < 50 && s.limits.openFiles !== 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      s = await status();
    }
    expect(s.limits.openFiles).toBe(0);
  }, 120_000);

  it('files unlinked while open cost the daemon no descriptor beyond their handles', async () => {
    const before = d.fdCount();
    const held = await holdOpen(opener, A, [join(d.home('atk', 'a'), 'gone'), '400', 'unlinked', '0']);
    try {
      expect(held.result).toMatchObject({ opened: 400, err: null });
      expect(homeOf(await status(), 'atk', 'a').openFiles).toBe(400);
      // One backing descriptor per handle; a hidden node used to hold an O_PATH descriptor of its own.
      expect(d.fdCount() - before).toBeLessThan(400 + 50);
    } finally {
      expect(await held.release()).toBe(0);
    }
  }, 120_000);

  it('one uid in two processes stops at limits.openFilesPerUid, below its home\'s limit; all homes together stop at the shared cap with ENFILE, short of the reserve', async () => {
    const held: Held[] = [];
    try {
      const b = await holdOpen(opener, U2, [join(d.home('two', 'b'), 'f'), '1200', 'open', '0']);
      held.push(b);
      expect(b.result).toMatchObject({ opened: 1200, err: null });
      // An owner has one home (an owner belongs to one home): its second process, in the same
      // home, meets the uid's limit, not the home's (the default 4096).
      const c = await holdOpen(opener, U2, [join(d.home('two', 'b'), 'f'), '20000', 'open', '3']);
      held.push(c);
      expect(c.result).toMatchObject({ opened: PER_UID - 1200, err: 'EMFILE', again: ['EMFILE'] });
      expect(await d.waitForLog((l) => l.code === 'OPEN_FILES_EXCEEDED' && l.home === 'two/b')).toMatchObject({ scope: 'uid', limit: PER_UID });

      const a = await holdOpen(opener, A, [join(d.home('atk', 'a'), 'f'), '20000', 'open', '0']);
      held.push(a);
      expect(a.result).toMatchObject({ opened: TIGHT, err: 'EMFILE' });
      // What is left of the shared cap: the next home gets ENFILE once it is used up (creates, here).
      const cap = (await status()).limits.openFilesCap;
      const left = cap - PER_UID - TIGHT;
      expect(left).toBeGreaterThan(0);
      const dd = await holdOpen(opener, D, [join(d.home('atk', 'd'), 'n'), '20000', 'create', '3']);
      held.push(dd);
      expect(dd.result).toMatchObject({ opened: left, err: 'ENFILE', again: ['ENFILE'] });
      // The refused creates made nothing.
      expect(existsSync(join(d.backingOf('atk', 'd'), `n-${left}`))).toBe(false);
      expect(existsSync(join(d.backingOf('atk', 'd'), `n-${left + 1000000}`))).toBe(false);
      expect(await d.waitForLog((l) => l.code === 'DAEMON_FILES_EXHAUSTED')).toMatchObject({ level: 'warn', errno: 'ENFILE', scope: 'daemon' });

      // The daemon's own work runs on its reserve: the control socket answers, with the numbers.
      const s = await status();
      expect(s.limits.openFiles).toBe(cap);
      expect(s.limits.descriptorsInUse).toBeLessThan(NOFILE - RESERVE / 2);
      const list = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'list']);
      expect(list.code).toBe(0);
      // A victim's metadata work goes on (no descriptor kept); a new open waits for the others to close (ENFILE).
      const v = await runAs(V.uid, V.gid, `cd ${d.home('vic', 'v')} && ls f-after-1 && mkdir -p sub && cat f-after-1 2>&1; echo rc=$?`);
      expect(v.stdout).toMatch(/^f-after-1\n[\s\S]*Too many open files in system\nrc=1\n$/);
    } finally {
      for (const h of held) expect(await h.release()).toBe(0);
    }
    const s = await status();
    expect(s.limits.openFiles).toBe(0);
    await victimWorks('later');
    expect(s.mount.mounted).toBe(true);
  }, 120_000);

  it('stops cleanly afterwards (umount2 from the binding)', async () => {
    const code = await d.stopKeep();
    expect(code).toBe(0);
    expect(d.logs.find((l) => l.msg === 'unmounted')).toBeDefined();
    expect(d.logs.filter((l) => l.msg === 'unmount failed')).toEqual([]);
    rmSync(d.dir, { recursive: true, force: true });
  });
});
