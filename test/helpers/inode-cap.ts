import { expect } from 'vitest';
import type { OwnerSuite } from './owner-suite.js';

/**
 * A home capped at `cap` inodes, filled by one kind of entry: `make` and
 * `remove` are Python statements on the path `p`. The owner makes cap + 10
 * entries (the first gets the caller create slots: the pause lets the daemon
 * grant them, whatever the load); exactly `cap` fit and the rest are refused
 * with EDQUOT; one removed, the next fits and the one after is refused again.
 * The usage is exact throughout and a rescan finds no drift.
 */
export async function fillToInodeCap(s: OwnerSuite, id: string, cap: number, make: string, remove: string): Promise<void> {
  const [tenant, key] = id.split('/') as [string, string];
  const home = s.d.home(tenant, key);
  const out = await s.py(
    `import os,sys,errno,time
h=sys.argv[1]
res=[]
for i in range(${cap + 10}):
  p=os.path.join(h, 'e%02d' % i)
  try:
    ${make}; res.append('ok')
  except OSError as e: res.append(errno.errorcode[e.errno])
  if i == 0: time.sleep(0.5)
print(' '.join(res))`,
    home,
  );
  expect(out).toBe([...Array(cap).fill('ok'), ...Array(10).fill('EDQUOT')].join(' '));
  expect(await s.usage(id)).toMatchObject({ inodes: cap, bytes: 0 });
  const again = await s.py(
    `import os,sys,errno,time
h=sys.argv[1]
p=os.path.join(h, 'e00')
${remove}
time.sleep(0.3)
p=os.path.join(h, 'x')
${make}
p=os.path.join(h, 'y')
try:
  ${make}; print('no refusal')
except OSError as e: print(errno.errorcode[e.errno])`,
    home,
  );
  expect(again).toBe('EDQUOT');
  expect(await s.usage(id)).toMatchObject({ inodes: cap, bytes: 0 });
  const r = JSON.parse(await s.ctl('--json', 'rescan', id)) as { drift: { bytes: number; inodes: number } };
  expect(r.drift).toEqual({ bytes: 0, inodes: 0 });
}
