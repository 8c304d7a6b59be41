import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { namesBelow, regularBytes } from '../helpers/backing.js';
import { canMount, skipReason } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite } from '../helpers/owner-suite.js';

/**
 * Every name costs an inode: a hard link is one more against the home's inode
 * cap, so a home capped at 10 inodes cannot make 60,000 names (ext4 allows
 * 65,000 links per inode, and their directory blocks are charged to no one).
 * The bytes of a hard-linked file still count once.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const U = { uid: BASE + 3, gid: BASE + 3 };
const T = 'nc';
const tiny = { ...BUILTIN_PROFILES.home, maxHomeBytes: 1024 * 1024, maxInodes: 10 };

if (!canMount) console.warn(`names-cap integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount)('names cap: every hard link counts against the inode cap', () => {
  const s = ownerSuite({ homes: { [`${T}/tiny`]: { owner: U, profile: 'tiny' } }, config: { owners: OWNERS, profiles: { tiny } } });

  it('a 10-inode home makes 9 links to its one file, then EDQUOT; the ledger counts names, bytes once', async () => {
    const home = s.d.home(T, 'tiny');
    const out = await s.py(
      `import os, sys, errno
h = sys.argv[1]
open(os.path.join(h, 'f'), 'wb').write(b'x')
made = 0
err = None
for i in range(60000):
    try:
        os.link(os.path.join(h, 'f'), os.path.join(h, ('n%05d' % i) + 'y' * 240))
        made += 1
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
print(made, err)`,
      home,
    );
    expect(out).toBe('9 EDQUOT');
    const backing = s.d.backingOf(T, 'tiny');
    expect(namesBelow(backing)).toBe(10);
    expect(await s.usage(`${T}/tiny`)).toMatchObject({ bytes: 1, inodes: 10 });
    expect(regularBytes(backing)).toBe(1);
  });

  it('a rename between two names of one inode removes neither (and gives back no inode); unlinks give one back each', async () => {
    const home = s.d.home(T, 'tiny');
    const names = readdirSync(home).filter((n) => n.startsWith('n'));
    await s.py(`import os, sys\nos.rename(sys.argv[1], sys.argv[2])`, join(home, names[0]!), join(home, names[1]!));
    expect(await s.usage(`${T}/tiny`)).toMatchObject({ bytes: 1, inodes: 10 });
    await s.py(`import os, sys\nfor n in sys.argv[2:]: os.unlink(os.path.join(sys.argv[1], n))`, home, ...names.slice(0, 4));
    expect(await s.usage(`${T}/tiny`)).toMatchObject({ bytes: 1, inodes: 6 });
    // the freed names can be made again, and the rescan agrees with the ledger
    await s.py(`import os, sys\nos.link(os.path.join(sys.argv[1], 'f'), os.path.join(sys.argv[1], 'again'))`, home);
    const r = JSON.parse(await s.ctl('--json', 'rescan', `${T}/tiny`)) as { drift: { bytes: number; inodes: number }; after: { inodes: number } };
    expect(r.drift).toEqual({ bytes: 0, inodes: 0 });
    expect(r.after.inodes).toBe(namesBelow(s.d.backingOf(T, 'tiny')));
  });
});
