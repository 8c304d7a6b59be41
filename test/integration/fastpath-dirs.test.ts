// The directory descriptors the binding keeps for GETATTR (native/src/fastpath/fastpath_dircache.c):
// a path two levels or more below a home is lstat'ed below the kept descriptor of its
// directory. Nothing a home's owner does through the mount may make it answer from a
// directory that is no longer at that path (renamed, exchanged, removed and made again:
// every RENAME and RMDIR request moves the generation the descriptors are trusted by), nor
// from another home's directory of the same name, nor from a home deleted and made again.
// With attribute and entry timeouts of 0, every lstat of the owner's script is a LOOKUP
// the binding answers (the counts in status prove it went through the kept descriptors).
import { chownSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownersFrom } from '../helpers/owner-suite.js';

if (!canMount) console.warn(`fastpath-dirs integration suite skipped: ${skipReason}`);

const OWNERS = ownerRange(import.meta.filename);
const HOMES = ['t/a', 't/b', 't/c'];
const PO = ownersFrom<string>(OWNERS.from + 17, HOMES);

type DirStats = { answered: number; dirCacheHits: number; dirCacheWalks: number; dirCacheHeld: number; rmdirAnswered: number };

// The owner's script, in its home: each line printed is what an lstat saw (size or errno name).
const MOVES = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def size(p):
  try: return str(os.lstat(p).st_size)
  except OSError as e: return errno.errorcode[e.errno]
def put(p, n):
  with open(p, "w") as f: f.write("x" * n)
os.makedirs("d/x"); put("d/x/f", 3)
print("first", size("d/x/f"))
os.rename("d/x", "d/y"); os.mkdir("d/x"); put("d/x/f", 7)
print("renamed", size("d/x/f"), size("d/y/f"))
os.unlink("d/x/f"); os.rmdir("d/x"); os.mkdir("d/x"); put("d/x/f", 11)
print("remade", size("d/x/f"))
if libc.renameat2(-100, b"d/x", -100, b"d/y", 2) != 0: raise OSError(ctypes.get_errno(), "renameat2")
print("exchanged", size("d/x/f"), size("d/y/f"))
os.makedirs("d/z/deep"); put("d/z/deep/f", 5); size("d/z/deep/f")
os.rename("d/z", "d/w")
print("parent moved", size("d/z/deep/f"), size("d/w/deep/f"))
`;

describe.skipIf(!canMount).each([
  ['in the binding', true],
  ['in JavaScript', false],
])('kept directory descriptors, rmdir %s', (_how, nativeRmdir) => {
  let d: RunningDaemon;

  const stats = async () => ((await d.status()) as { native: { fastPath: DirStats } }).native.fastPath;
  const ctl = async (...args: string[]) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return r.stdout;
  };
  const inHome = (home: string, script: string) => runAs(PO[home]!.uid, PO[home]!.gid, `cd ${join(d.mount, home)} && python3 -c '${script}'`);

  beforeAll(async () => {
    d = await startDaemon({
      create: HOMES,
      homes: Object.fromEntries(HOMES.map((h) => [h, { owner: PO[h]! }])),
      config: { owners: OWNERS, fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0, nativeRmdir } },
    });
  });

  afterAll(async () => {
    await d?.stop();
  });

  it('a directory renamed, exchanged, removed and made again, or its parent moved: every lstat sees the directory now at the path', async () => {
    const before = await stats();
    const r = await inHome('t/a', MOVES);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual(['first 3', 'renamed 7 3', 'remade 11', 'exchanged 3 11', 'parent moved ENOENT 5']);
    const after = await stats();
    expect(after.dirCacheHits - before.dirCacheHits).toBeGreaterThan(5);
    if (nativeRmdir) expect(after.rmdirAnswered).toBeGreaterThan(before.rmdirAnswered);
    else expect(after.rmdirAnswered).toBe(before.rmdirAnswered);
  });

  it("the same directory path in another home is that home's own", async () => {
    for (const [home, n] of [['t/b', 4], ['t/c', 9]] as const) {
      const r = await inHome(home, `import os\nos.makedirs("s/t")\nopen("s/t/f", "w").write("x" * ${n})`);
      expect(r.code, r.stderr).toBe(0);
    }
    const both = `import os\nprint(" ".join(str(os.lstat("%s/s/t/f" % h).st_size) for h in ["../b", "../c", "../b", "../c"]))`;
    // As root (the homes' owners cannot reach each other's homes): one process, alternating.
    const r = await runAsync('python3', ['-c', both], { cwd: join(d.mount, 't', 'b') });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('4 9 4 9');
  });

  it('a home deleted and made again: nothing of the old directories is served', async () => {
    await ctl('settings', 'set', '--tenant', 't', '--project', 'del', 'project');
    await ctl('resolve', '--tenant', 't', '--project', 'del');
    const was = JSON.parse(await ctl('--json', 'usage', 't/del')).owner as { uid: number; gid: number };
    const r = await runAs(was.uid, was.gid, `cd ${join(d.mount, 't', 'del')} && python3 -c 'import os\nos.makedirs("g/h")\nopen("g/h/f", "w").write("x" * 6)\nprint(os.lstat("g/h/f").st_size)'`);
    expect(r.stdout.trim(), r.stderr).toBe('6');
    const held = (await stats()).dirCacheHeld;
    expect(held).toBeGreaterThan(0);
    await ctl('delete-project', '--tenant', 't', 'del', '--force');
    // Its descriptors were closed with its publication.
    expect((await stats()).dirCacheHeld).toBeLessThan(held);
    await ctl('resolve', '--tenant', 't', '--project', 'del');
    const owner = JSON.parse(await ctl('--json', 'usage', 't/del')).owner as { uid: number; gid: number };
    // The new home's directory of the same path, planted on the backing, holds a file of another size.
    const top = join(d.backing, 't', 'del', 'g');
    mkdirSync(join(top, 'h'), { recursive: true, mode: 0o700 });
    for (const p of [top, join(top, 'h')]) chownSync(p, owner.uid, owner.gid);
    writeFileSync(join(top, 'h', 'f'), 'x'.repeat(2));
    chownSync(join(top, 'h', 'f'), owner.uid, owner.gid);
    const s = await runAsync('stat', ['-c', '%s', join(d.mount, 't', 'del', 'g', 'h', 'f')]);
    expect(s.stdout.trim(), s.stderr).toBe('2');
  });
});

describe.skipIf(!canMount)('kept directory descriptors, open backing', () => {
  let d: RunningDaemon;
  const stats = async () => ((await d.status()) as { native: { fastPath: DirStats } }).native.fastPath;

  beforeAll(async () => {
    d = await startDaemon({
      create: ['t/a'],
      homes: { 't/a': { owner: PO['t/a']! } },
      config: { owners: OWNERS, allowOpenBacking: true, fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0 } },
    });
  });

  afterAll(async () => {
    await d?.stop();
  });

  it('where other uids may change the backing (allowOpenBacking), nothing is kept: a directory swapped behind the daemon is seen at once', async () => {
    const o = PO['t/a']!;
    const r = await runAs(o.uid, o.gid, `cd ${join(d.mount, 't', 'a')} && python3 -c 'import os\nos.makedirs("d/x")\nopen("d/x/f", "w").write("x" * 3)\nprint(os.lstat("d/x/f").st_size)'`);
    expect(r.stdout.trim(), r.stderr).toBe('3');
    const back = (p: string) => join(d.backing, 't', 'a', p);
    renameSync(back('d/x'), back('d/y'));
    mkdirSync(back('d/x'), { mode: 0o700 });
    writeFileSync(back('d/x/f'), 'x'.repeat(7));
    for (const p of ['d/x', 'd/x/f']) chownSync(back(p), o.uid, o.gid);
    const s = await runAsync('stat', ['-c', '%s', join(d.mount, 't', 'a', 'd', 'x', 'f')]);
    expect(s.stdout.trim(), s.stderr).toBe('7');
    const after = await stats();
    expect(after.answered).toBeGreaterThan(0);
    expect(after.dirCacheHits).toBe(0);
    expect(after.dirCacheHeld).toBe(0);
  });
});
