import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { namesBelow, regularBytes } from '../helpers/backing.js';
import { canMount, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite } from '../helpers/owner-suite.js';

/**
 * Issue 13, mutating operations: UNLINK of a file JS does not hold open is
 * done on a session worker thread (fuse.nativeUnlink, with the fast path) in homes
 * whose ledger is built, with no rescan holding the gate and no tenant budget.
 * What leaves the home goes into its pending pair, which the TypeScript ledger
 * takes before it answers anything: the budget stays exact at write time, the
 * ledger equals the disk, an open file keeps its bytes until its last close.
 */

const KiB = 1024;
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const U = { uid: BASE + 7, gid: BASE + 7 };
/** the owner of nu/race (an owner belongs to one home) */
const UR = { uid: BASE + 9, gid: BASE + 9 };
/** the budgeted tenant's owner */
const UB = { uid: BASE + 8, gid: BASE + 8 };
const T = 'nu';
const TB = 'nub';

if (!canMount) console.warn(`native-unlink integration suite skipped: ${skipReason}`);

const capped = { ...BUILTIN_PROFILES.home, maxHomeBytes: 200 * KiB, maxFileBytes: 0, maxInodes: 0 };
const HOMES = {
  [`${T}/cap`]: { owner: U, profile: 'capped' },
  [`${T}/race`]: { owner: UR, profile: 'capped' },
  [`${TB}/budgeted`]: { owner: UB, profile: 'capped' },
};

type Native = { unlinkAnswered: number; unlinkFallbacks: number };

describe.skipIf(!canMount)('native unlink (fuse.nativeUnlink): the ledger takes what left the home before its next answer', () => {
  const s = ownerSuite({
    homes: HOMES,
    config: { owners: OWNERS, profiles: { capped }, tenants: { [TB]: { maxBytes: 10 * 1024 * KiB } } },
  });
  const { py, ctl, usage } = s;
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
  const ledgerEqualsDisk = async (home: string) => {
    const [t, k] = home.split('/') as [string, string];
    const u = await usage(home);
    expect({ bytes: u.bytes, inodes: u.inodes }, home).toEqual({ bytes: regularBytes(s.d.backingOf(t, k)), inodes: namesBelow(s.d.backingOf(t, k)) });
  };

  it('rm of closed files is done natively; the bytes freed are at once writable again, to the byte', async () => {
    const home = s.d.home(T, 'cap');
    const before = await native();
    // 200 files of 1 KiB: at the budget exactly (200 KiB)
    expect(await py(`import os,sys\nfor i in range(200):\n  open(os.path.join(sys.argv[1], 'f%d' % i), 'wb').write(b'x' * 1024)\nprint('ok')`, home)).toBe('ok');
    expect(await usage(`${T}/cap`)).toMatchObject({ bytes: 200 * KiB });
    // In one process, no control request in between: an empty file is created (the last
    // ledger change before the removals), 3 files are removed (natively), then the file
    // gets exactly what they held, then one byte more: the write's own check must see them.
    const out = await py(
      `import os,sys,errno
h=sys.argv[1]
fd=os.open(os.path.join(h, 'new'), os.O_WRONLY|os.O_CREAT, 0o600)
for i in range(3): os.unlink(os.path.join(h, 'f%d' % i))
res=[os.write(fd, b'y' * 3072)]
try: res.append(os.write(fd, b'z'))
except OSError as e: res.append(errno.errorcode[e.errno])
os.close(fd)
print(res)`,
      home,
    );
    expect(out).toBe("[3072, 'EDQUOT']");
    const after = await native();
    expect(after.unlinkAnswered - before.unlinkAnswered).toBe(3);
    // rm -rf of everything: all native, the ledger back to an empty home
    const r = await runAsync('setpriv', [`--reuid=${U.uid}`, `--regid=${U.gid}`, '--clear-groups', 'sh', '-c', `rm -f ${home}/*`], { env: { PATH: SYSTEM_PATH } });
    expect(r.code, r.stderr).toBe(0);
    expect((await native()).unlinkAnswered - after.unlinkAnswered).toBe(198);
    expect(await usage(`${T}/cap`)).toMatchObject({ bytes: 0 });
    await ledgerEqualsDisk(`${T}/cap`);
  });

  it('hard links: every name is an inode, the last name frees the bytes', async () => {
    const home = s.d.home(T, 'cap');
    await py(`import os,sys\nopen(os.path.join(sys.argv[1], 'a'), 'wb').write(b'q' * 5000)\nos.link(os.path.join(sys.argv[1], 'a'), os.path.join(sys.argv[1], 'b'))`, home);
    const base = await usage(`${T}/cap`);
    expect(base.bytes).toBe(5000);
    await py(`import os,sys\nos.unlink(os.path.join(sys.argv[1], 'a'))`, home);
    expect(await usage(`${T}/cap`)).toMatchObject({ bytes: 5000, inodes: base.inodes - 1 });
    await py(`import os,sys\nos.unlink(os.path.join(sys.argv[1], 'b'))`, home);
    expect(await usage(`${T}/cap`)).toMatchObject({ bytes: 0, inodes: base.inodes - 2 });
    await ledgerEqualsDisk(`${T}/cap`);
  });

  it('a file JS holds open through another name is left to JS: its bytes stay until the last close, and so does its growth', async () => {
    const home = s.d.home(T, 'cap');
    await py(`import os,sys\nopen(os.path.join(sys.argv[1], 'held'), 'wb').write(b'h' * 4000)\nos.link(os.path.join(sys.argv[1], 'held'), os.path.join(sys.argv[1], 'other'))`, home);
    const base = await usage(`${T}/cap`);
    // The holder opens `held` and removes it (one name of two: a plain unlink, which the
    // binding leaves to JS, the inode being open); then `other`, the last name, is removed
    // by another process: the session knows the inode is open (one node for both names)
    // and hides the name instead (JS's rename); the binding never unlinks it.
    const holder = spawn('setpriv', [`--reuid=${U.uid}`, `--regid=${U.gid}`, '--clear-groups', 'python3', '-c', `import os,sys
fd=os.open(sys.argv[1], os.O_RDWR)
os.unlink(sys.argv[1])
print('open', flush=True)
sys.stdin.readline()
os.pwrite(fd, b'g' * 1000, 4000)
print('grown', flush=True)
sys.stdin.readline()
os.close(fd)
print('closed', flush=True)`, join(home, 'held')], { stdio: ['pipe', 'pipe', 'inherit'], env: { PATH: SYSTEM_PATH } });
    const lines = createInterface({ input: holder.stdout! });
    const next = () => new Promise<string>((resolve) => lines.once('line', (l) => resolve(l.trim())));
    try {
      expect(await next()).toBe('open');
      const before = await native();
      await py(`import os,sys\nos.unlink(os.path.join(sys.argv[1], 'other'))`, home);
      const after = await native();
      expect(after.unlinkAnswered - before.unlinkAnswered).toBe(0);
      // nothing is visible in the home any more (its orphan, which no path names, keeps the inode: fs/hidden.ts), but its bytes are still there
      const left = readdirSync(s.d.backingOf(T, 'cap'), { encoding: 'buffer' });
      expect(left.filter((n) => n[0] !== 0xff).map(String)).toEqual([]);
      expect(left.length).toBe(1);
      expect((await usage(`${T}/cap`)).bytes).toBe(base.bytes);
      holder.stdin!.write('\n');
      expect(await next()).toBe('grown');
      expect((await usage(`${T}/cap`)).bytes).toBe(base.bytes + 1000);
      holder.stdin!.write('\n');
      expect(await next()).toBe('closed');
    } finally {
      holder.kill('SIGKILL');
    }
    // two names, two inodes; the bytes stayed until the last close
    expect(await usage(`${T}/cap`)).toMatchObject({ bytes: 0, inodes: base.inodes - 2 });
    await ledgerEqualsDisk(`${T}/cap`);
  });

  it('a tenant with a budget keeps its unlinks in JS; set-tenant-budget switches a tenant live, both ways', async () => {
    const budgeted = s.d.home(TB, 'budgeted');
    const asB = async (script: string) => {
      const r = await runAsync('setpriv', [`--reuid=${UB.uid}`, `--regid=${UB.gid}`, '--clear-groups', 'python3', '-c', script, budgeted], { env: { PATH: SYSTEM_PATH } });
      expect(r.code, r.stderr).toBe(0);
    };
    await asB(`import os,sys\nfor i in range(5): open(os.path.join(sys.argv[1], 'f%d' % i), 'wb').write(b'b' * 100)`);
    let before = await native();
    await asB(`import os,sys\nfor i in range(5): os.unlink(os.path.join(sys.argv[1], 'f%d' % i))`);
    let after = await native();
    expect(after).toMatchObject({ unlinkAnswered: before.unlinkAnswered, unlinkFallbacks: before.unlinkFallbacks });
    expect(await usage(`${TB}/budgeted`)).toMatchObject({ bytes: 0 });

    const home = s.d.home(T, 'cap');
    const rmFive = async () => {
      await py(`import os,sys\nfor i in range(5): open(os.path.join(sys.argv[1], 'g%d' % i), 'wb').write(b'g' * 100)`, home);
      before = await native();
      await py(`import os,sys\nfor i in range(5): os.unlink(os.path.join(sys.argv[1], 'g%d' % i))`, home);
      after = await native();
      return after.unlinkAnswered - before.unlinkAnswered;
    };
    await ctl('set-tenant-budget', T, '1M');
    expect(await rmFive()).toBe(0);
    await ctl('set-tenant-budget', T, 'off');
    expect(await rmFive()).toBe(5);
    await ledgerEqualsDisk(`${T}/cap`);
  });

  it('racing unlinks, creates, links and rescans leave the ledger equal to the disk', async () => {
    const home = s.d.home(T, 'race');
    const worker = (seed: number) =>
      py(
        `import os,sys,random
h=sys.argv[1]; r=random.Random(${seed})
for i in range(1500):
    n=os.path.join(h, 'r%d' % r.randrange(40))
    op=r.randrange(5)
    try:
        if op==0: os.unlink(n)
        elif op==1:
            fd=os.open(n, os.O_WRONLY|os.O_CREAT, 0o600); os.pwrite(fd, b'w'*r.randrange(1, 900), r.randrange(0, 900)); os.close(fd)
        elif op==2: os.link(n, os.path.join(h, 'r%d' % r.randrange(40)))
        elif op==3:
            fd=os.open(n, os.O_RDONLY); os.unlink(n); os.close(fd)
        else: os.rename(n, os.path.join(h, 'r%d' % r.randrange(40)))
    except OSError: pass
print('done')`,
        home,
      );
    const rescans = (async () => {
      for (let i = 0; i < 6; i++) {
        const r = JSON.parse(await ctl('--json', 'rescan', `${T}/race`)) as { drift: { bytes: number; inodes: number } };
        // The ledger was right before each walk: no drift, ever.
        expect(r.drift, `rescan ${i}`).toEqual({ bytes: 0, inodes: 0 });
      }
    })();
    const before = await native();
    expect(await Promise.all([worker(1), worker(2), worker(3), rescans])).toEqual(['done', 'done', 'done', undefined]);
    expect((await native()).unlinkAnswered - before.unlinkAnswered).toBeGreaterThan(100);
    await ledgerEqualsDisk(`${T}/race`);
    const final = JSON.parse(await ctl('--json', 'rescan', `${T}/race`)) as { drift: { bytes: number; inodes: number } };
    expect(final.drift).toEqual({ bytes: 0, inodes: 0 });
  }, 180_000);
});
