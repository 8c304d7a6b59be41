import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canMount, runAsync, skipReason } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite } from '../helpers/owner-suite.js';

/**
 * The kernel keeps names and attributes for minutes (the defaults), and the
 * daemon tells it exactly what it changes behind its back. Each test first
 * shows the kernel kept an answer past the old one-second timeout (a change
 * made in the backing tree, which the daemon never hears of, is not seen),
 * then makes the daemon change something and expects the very next `stat`
 * to see it: without the invalidation the kernel would answer from its cache
 * for another five minutes.
 */

const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const T = 'kc';
const HOMES = {
  [`${T}/prof`]: { owner: { uid: BASE + 1, gid: BASE + 1 }, profile: 'posix' },
  [`${T}/scan`]: { owner: { uid: BASE + 2, gid: BASE + 2 }, profile: 'posix' },
  [`${T}/stat`]: { owner: { uid: BASE + 3, gid: BASE + 3 }, profile: 'home' },
  [`${T}/list`]: { owner: { uid: BASE + 4, gid: BASE + 4 }, profile: 'posix' },
};

if (!canMount) console.warn(`kernel-cache integration suite skipped: ${skipReason}`);

/** Longer than the old default timeout (1 s): what is still cached after it was kept on purpose. */
const pastOldTimeout = (): Promise<void> => new Promise((r) => setTimeout(r, 1500));

/**
 * A directory's names, listed twice: the kernel's first listing after a change may record the
 * directory's mtime from before that change, and the next one refills once; from the second on,
 * it is what the kernel keeps.
 */
const listing = `import os,sys\nos.listdir(sys.argv[1])\nprint(' '.join(sorted(os.listdir(sys.argv[1]))))`;

const modeOf = `import os,sys\nprint(oct(os.stat(sys.argv[1]).st_mode & 0o7777))`;

describe.skipIf(!canMount)('long kernel caches, invalidated exactly', () => {
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS } });

  /**
   * What a process that holds `path` open (so no memory pressure can evict what the kernel
   * keeps of it) sees with `look` (a python expression of `p`): twice first (the kernel's
   * first answer after a change may be refilled once), then, more than the old one-second
   * timeout later, once more after `behind` changed the backing tree: "before | after".
   */
  const seenAcross = async (path: string, look: string, behind: () => Promise<void>): Promise<string> => {
    const sig = mkdtempSync(join(tmpdir(), 'homesfs-kc-'));
    chmodSync(sig, 0o777);
    try {
      const seen = s.py(
        `import os,sys,time\np,sig=sys.argv[1:3]\nfd=os.open(p, os.O_RDONLY)\nlook=lambda: ${look}\nlook()\na=look()\ntime.sleep(1.5)\nopen(os.path.join(sig, 'ready'), 'w').close()\nwhile not os.path.exists(os.path.join(sig, 'go')): time.sleep(0.01)\nprint(a, '|', look())`,
        path,
        sig,
      );
      while (!existsSync(join(sig, 'ready'))) await new Promise((r) => setTimeout(r, 10));
      await behind();
      writeFileSync(join(sig, 'go'), '');
      return await seen;
    } finally {
      rmSync(sig, { recursive: true, force: true });
    }
  };

  it('the kernel keeps attributes past a second: a mode changed behind the daemon is not seen until a rescan says so', async () => {
    const home = s.d.home(T, 'scan');
    await s.py(`import os,sys\nfd=os.open(os.path.join(sys.argv[1], 'f'), os.O_CREAT|os.O_WRONLY, 0o600); os.close(fd)`, home);
    const seen = await seenAcross(join(home, 'f'), 'oct(os.stat(p).st_mode & 0o7777)', async () => {
      // Behind the daemon's back (an admin's hand on the backing tree): nobody tells the kernel.
      chmodSync(join(s.d.backingOf(T, 'scan'), 'f'), 0o640);
    });
    expect(seen).toBe('0o600 | 0o600');
    await s.ctl('rescan', `${T}/scan`);
    expect(await s.py(modeOf, join(home, 'f'))).toBe('0o640');
  }, 30_000);

  it('set-profile: the new presentation is what the next stat shows, for every cached node of the home', async () => {
    const home = s.d.home(T, 'prof');
    await s.py(
      `import os,sys\nh=sys.argv[1]\nos.mkdir(os.path.join(h, 'd'), 0o755)\nfor n in ['f', 'd/g']:\n  fd=os.open(os.path.join(h, n), os.O_CREAT|os.O_WRONLY, 0o644); os.close(fd)`,
      home,
    );
    const modes = `import os,sys\nh=sys.argv[1]\nprint(' '.join(oct(os.stat(os.path.join(h, n)).st_mode & 0o7777) for n in ['f', 'd', 'd/g']))`;
    expect(await s.py(modes, home)).toBe('0o644 0o755 0o644');
    await pastOldTimeout();
    // 'home' presents the owner's bits only.
    await s.ctl('set-profile', `${T}/prof`, 'home');
    expect(await s.py(modes, home)).toBe('0o600 0o700 0o600');
    await s.ctl('set-profile', `${T}/prof`, 'posix');
    expect(await s.py(modes, home)).toBe('0o644 0o755 0o644');
  }, 30_000);

  it('the status file\'s size is never kept: every stat gives the size of what a read returns', async () => {
    const home = s.d.home(T, 'stat');
    const sizes = `import os,sys\np=os.path.join(sys.argv[1], '.homesfs', 'status')\nst=os.stat(p).st_size\nn=len(open(p,'rb').read())\nprint(st, n)`;
    const first = (await s.py(sizes, home)).split(' ');
    expect(first[0]).toBe(first[1]);
    // A stat with no read after it (a read would make the kernel ask the atime again anyway).
    expect(await s.py(`import os,sys\nprint(os.stat(os.path.join(sys.argv[1], '.homesfs', 'status')).st_size)`, home)).toBe(first[1]);
    // The text grows with the home's figures; no request about the status file says so.
    await s.py(`import os,sys\nopen(os.path.join(sys.argv[1], 'grow'), 'wb').write(b'x' * 1234567)`, home);
    const second = (await s.py(sizes, home)).split(' ');
    expect(second[0]).toBe(second[1]);
    expect(second[1]).not.toBe(first[1]);
  }, 30_000);

  it('the kernel keeps a listing: a name made behind the daemon is not listed until a rescan says so', async () => {
    const home = s.d.home(T, 'list');
    await s.py(`import os,sys\nos.mkdir(os.path.join(sys.argv[1], 'd'))\nopen(os.path.join(sys.argv[1], 'd', 'a'), 'w').close()`, home);
    const seen = await seenAcross(join(home, 'd'), "' '.join(sorted(os.listdir(p)))", async () => {
      // Behind the daemon's back, and with the directory's mtime put back (as `rsync -t` or
      // `tar` would): nothing tells the kernel, and the mtime it checks a listing against is
      // the one it recorded, so only the daemon's invalidation can drop the listing.
      const behind = await runAsync('python3', [
        '-c',
        `import os,sys\nd=sys.argv[1]\nst=os.stat(d)\nopen(os.path.join(d, 'b'), 'w').close()\nos.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))`,
        join(s.d.backingOf(T, 'list'), 'd'),
      ]);
      expect(behind.stderr).toBe('');
    });
    expect(seen).toBe('a | a');
    await s.ctl('rescan', `${T}/list`);
    expect(await s.py(listing, join(home, 'd'))).toBe('a b');
    // A change through the mount is seen at once by every lister (the kernel drops its listing by itself).
    await s.py(`import os,sys\nos.unlink(os.path.join(sys.argv[1], 'a'))\nopen(os.path.join(sys.argv[1], 'c'), 'w').close()`, join(home, 'd'));
    expect(await s.py(listing, join(home, 'd'))).toBe('b c');
  }, 30_000);

  it('a home the daemon creates or deletes is in the very next listing of its tenant, although no one ever looked its name up', async () => {
    const tenant = join(s.d.mount, T);
    // Any uid may list a tenant: root in a child process (never this one: it serves nothing).
    const list = async (): Promise<string> => {
      const r = await runAsync('python3', ['-c', listing, tenant]);
      if (r.code !== 0) throw new Error(r.stderr);
      return r.stdout.trim();
    };
    const before = await list();
    expect(before.split(' ')).not.toContain('fresh');
    await pastOldTimeout();
    await s.ctl('create', `${T}/fresh`, '--owner', `${BASE + 5}:${BASE + 5}`, '--force');
    expect((await list()).split(' ')).toContain('fresh');
    await pastOldTimeout();
    await s.ctl('delete-home', `${T}/fresh`, '--force');
    expect(await list()).toBe(before);
  }, 30_000);
});
