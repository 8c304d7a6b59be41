import { chmodSync, existsSync, lchownSync, mkdirSync, readdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canMount, skipReason } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite } from '../helpers/owner-suite.js';

/**
 * The checks the binding makes on its own when it answers an OPEN or a CREATE
 * without JavaScript: the confined walk (openat2 RESOLVE_BENEATH|NO_SYMLINKS)
 * and the depth cap. Each test first shows the native path is live (a native
 * answer counted just before), then puts the binding before exactly the case
 * its check refuses, deterministically: the kernel is told to keep names and
 * misses for an hour, so after a warm-up it sends the OPEN or CREATE straight
 * for the path it cached, with no LOOKUP that JavaScript would answer first,
 * whatever was swapped in the backing tree behind it. Without the check the
 * binding would serve or make the file; with it, it leaves the request to the
 * daemon (a fallback counted), which refuses it.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const T = 'nc';
// one owner per home: an owner uid belongs to one home
const HOMES = {
  [`${T}/rd`]: { owner: { uid: BASE + 3, gid: BASE + 3 }, profile: 'home' },
  [`${T}/mk`]: { owner: { uid: BASE + 4, gid: BASE + 4 }, profile: 'home' },
  [`${T}/deep`]: { owner: { uid: BASE + 5, gid: BASE + 5 }, profile: 'home' },
};
const SECRET = 'root-only secret, never through the mount';

if (!canMount) console.warn(`native-confinement integration suite skipped: ${skipReason}`);

type Native = { openAnswered: number; openFallbacks: number; createAnswered: number; createFallbacks: number; openSlotsGranted: number };

describe.skipIf(!canMount)('native open and create keep to the home and its depth cap (the binding\'s own checks)', () => {
  const s = ownerSuite({
    homes: HOMES,
    config: { owners: OWNERS, fuse: { entryTimeout: 3600, attrTimeout: 3600, negativeTimeout: 3600 } },
  });
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
  /** Outside every home, on the backing's filesystem (so no device check stops a followed link): root's, 0600. */
  const plantSecret = (name: string): string => {
    const dir = join(s.d.dir, name);
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(join(dir, 'f'), SECRET, { mode: 0o600 });
    return dir;
  };
  /** A symlink in the backing tree that the home's owner could have made there (it is theirs). */
  const plantLink = (target: string, at: string, home: string): void => {
    symlinkSync(target, at);
    const o = s.owner(`${T}/${home}`);
    lchownSync(at, o.uid, o.gid);
  };
  const readScript = `import os,sys,errno
try:
  fd=os.open(sys.argv[1], os.O_RDONLY); print(os.read(fd, 4096).decode(errors='replace')); os.close(fd)
except OSError as e: print(errno.errorcode[e.errno])`;

  it('a read-only open the binding answers never follows a symlink swapped into the backing tree, last component or parent', async () => {
    const home = s.d.home(T, 'rd');
    const back = s.d.backingOf(T, 'rd');
    const outside = plantSecret('outside-rd');
    await s.py(`import os,sys\nh=sys.argv[1]\nos.mkdir(os.path.join(h, 'd'))\nfor n in ['f', 'g', 'd/f']: open(os.path.join(h, n), 'wb').write(b'mine')`, home);
    // Opens and closes (the first gets this caller open slots), and caches every name in the kernel.
    await s.py(`import os,sys\nh=sys.argv[1]\nfor i in range(3):\n  for n in ['f', 'g', 'd/f']: os.close(os.open(os.path.join(h, n), os.O_RDONLY))`, home);
    const n0 = await native();
    expect(n0.openSlotsGranted).toBeGreaterThan(0);
    // The native path is live: a cached name opens in the binding.
    expect(await s.py(readScript, join(home, 'g'))).toBe('mine');
    const n1 = await native();
    expect(n1.openAnswered).toBe(n0.openAnswered + 1);

    // The file itself becomes a symlink to the secret, and the directory a symlink to the secret's directory.
    renameSync(join(back, 'f'), join(back, 'f.was'));
    plantLink(join(outside, 'f'), join(back, 'f'), 'rd');
    renameSync(join(back, 'd'), join(back, 'd.was'));
    plantLink(outside, join(back, 'd'), 'rd');

    const last = await s.py(readScript, join(home, 'f'));
    const n2 = await native();
    const parent = await s.py(readScript, join(home, 'd/f'));
    const n3 = await native();
    expect([last, parent]).not.toContain(SECRET);
    expect(last).toMatch(/^E[A-Z]+$/);
    expect(parent).toMatch(/^E[A-Z]+$/);
    // Both OPENs reached the binding (the kernel sent them for the cached names) and went on to the daemon.
    expect([n2.openAnswered - n1.openAnswered, n2.openFallbacks - n1.openFallbacks]).toEqual([0, 1]);
    expect([n3.openAnswered - n2.openAnswered, n3.openFallbacks - n2.openFallbacks]).toEqual([0, 1]);
  });

  it('a create the binding answers never walks through a parent directory swapped for a symlink', async () => {
    const home = s.d.home(T, 'mk');
    const back = s.d.backingOf(T, 'mk');
    const outside = join(s.d.dir, 'outside-mk');
    mkdirSync(join(outside, 'b'), { recursive: true, mode: 0o755 });
    chmodSync(outside, 0o755);
    // Warm-up creates in a/b (the first gets this caller create slots), a miss for a/b/new cached in the kernel.
    await s.py(
      `import os,sys\nh=sys.argv[1]\nos.makedirs(os.path.join(h, 'a/b'))\nfor i in range(4): os.close(os.open(os.path.join(h, 'a/b/w%d' % i), os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600))\nassert not os.path.exists(os.path.join(h, 'a/b/new'))`,
      home,
    );
    const n0 = await native();
    expect(n0.openSlotsGranted).toBeGreaterThan(0);
    // The native path is live: a create in a/b is made in the binding.
    // (Then a stat of a/b: the create made the kernel drop a/b's attributes, and its permission check
    // for the next create would ask for them again, a GETATTR that the daemon answers before any CREATE.)
    await s.py(`import os,sys\nos.close(os.open(os.path.join(sys.argv[1], 'a/b/w9'), os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600))\nos.stat(os.path.join(sys.argv[1], 'a/b'))`, home);
    const n1 = await native();
    expect(n1.createAnswered).toBe(n0.createAnswered + 1);

    // O_CREAT without O_EXCL: the kernel trusts its cached miss (O_EXCL would make it look the name up again).
    renameSync(join(back, 'a'), join(back, 'a.was'));
    plantLink(outside, join(back, 'a'), 'mk');
    const out = await s.py(
      `import os,sys,errno\ntry:\n  os.close(os.open(os.path.join(sys.argv[1], 'a/b/new'), os.O_WRONLY|os.O_CREAT, 0o600)); print('created')\nexcept OSError as e: print(errno.errorcode[e.errno])`,
      home,
    );
    const n2 = await native();
    expect(readdirSync(join(outside, 'b'))).toEqual([]);
    expect(out).toMatch(/^E[A-Z]+$/);
    // The CREATE reached the binding (no LOOKUP first: the miss was cached) and went on to the daemon.
    expect([n2.createAnswered - n1.createAnswered, n2.createFallbacks - n1.createFallbacks]).toEqual([0, 1]);
    expect(existsSync(join(back, 'a.was', 'b', 'new'))).toBe(false);
  });

  it('a create the binding answers keeps the depth cap: a file at level 129 of a home is refused with EPERM', async () => {
    const home = s.d.home(T, 'deep');
    const d127 = Array(127).fill('d').join('/');
    const d128 = `${d127}/d`;
    // 128 levels of directories; warm-up creates (the first gets this caller create slots).
    await s.py(
      `import os,sys\nh=sys.argv[1]\nos.makedirs(os.path.join(h, sys.argv[2]))\nfor i in range(4): os.close(os.open(os.path.join(h, 'w%d' % i), os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600))`,
      home,
      d128,
    );
    const n0 = await native();
    expect(n0.openSlotsGranted).toBeGreaterThan(0);
    // The native path is live at depth: a file at level 128 is made in the binding.
    await s.py(`import os,sys\nos.close(os.open(os.path.join(sys.argv[1], sys.argv[2], 'f128'), os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600))`, home, d127);
    const n1 = await native();
    expect(n1.createAnswered).toBe(n0.createAnswered + 1);

    const out = await s.py(
      `import os,sys,errno\ntry:\n  os.close(os.open(os.path.join(sys.argv[1], sys.argv[2], 'f129'), os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600)); print('created')\nexcept OSError as e: print(errno.errorcode[e.errno])`,
      home,
      d128,
    );
    const n2 = await native();
    expect(out).toBe('EPERM');
    expect(existsSync(join(s.d.backingOf(T, 'deep'), d128, 'f129'))).toBe(false);
    expect([n2.createAnswered - n1.createAnswered, n2.createFallbacks - n1.createFallbacks]).toEqual([0, 1]);
  });
});
