import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, runAsync, skipReason, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { startOnExt4, type Ext4Daemon } from '../helpers/ext4-daemon.js';

/**
 * fsync(2) and fdatasync(2) through the mount reach the backing file: its
 * data is on the backing disk when the call returns. Seen without dropping
 * any cache: the backing is a small ext4 of its own, which allocates a
 * written file's blocks only at writeback (delayed allocation), and FIEMAP
 * (filefrag, asked not to sync) shows blocks still waiting for it as
 * `unknown_loc,delalloc`. Right after an fsync that reached the backing every
 * extent has its place on disk; an fsync answered without syncing leaves them
 * delayed (the kernel writes dirty data back only after 30 s, or under memory
 * pressure, or at a sync(2) somewhere on the host: each file is checked in
 * the moment after its own call, so such a sync would have to fall between
 * every call and its check to hide a missing fsync).
 */

const BASE = 700_000 + Math.floor(Math.random() * 60) * 10_000;
const U = { uid: BASE + 9, gid: BASE + 9 };
const T = 'fs';
const HOMES = { [`${T}/sync`]: { owner: U, profile: 'home' } };
const hasTools = ['mkfs.ext4', 'filefrag'].every((t) => spawnSync('sh', ['-c', `command -v ${t}`], { env: { PATH: SYSTEM_PATH } }).status === 0);

if (!canMount) console.warn(`fsync integration suite skipped: ${skipReason}`);
else if (!hasTools) console.warn('fsync integration suite skipped: mkfs.ext4 or filefrag missing (apt-get install e2fsprogs)');

describe.skipIf(!canMount || !hasTools)('fsync and fdatasync through the mount put the data on the backing disk', () => {
  let x: Ext4Daemon;
  let d: RunningDaemon;
  let tmp = '';

  beforeAll(async () => {
    x = await startOnExt4('fsync', HOMES, { from: BASE, to: BASE + 9_999 });
    d = x.d;
    tmp = x.tmp;
  }, 60_000);

  afterAll(async () => {
    await x?.stop();
  });

  /** The backing file's extents as FIEMAP reports them without syncing first: [placed on disk, still delayed]. */
  const extents = async (file: string): Promise<[number, number]> => {
    const r = await runAsync('filefrag', ['-v', file], { env: { PATH: SYSTEM_PATH } });
    if (r.code !== 0) throw new Error(`filefrag ${file}: ${r.stderr}`);
    const rows = r.stdout.split('\n').filter((l) => /^\s*\d+:/.test(l));
    const delayed = rows.filter((l) => /unknown_loc|delalloc/.test(l)).length;
    return [rows.length - delayed, delayed];
  };

  it('each file synced (fsync or fdatasync) through the mount has every extent on disk before it is closed', async () => {
    const home = d.home(T, 'sync');
    // The owner writes a file, syncs it, says so and waits (file still open) while the test looks at the backing file.
    const code = `import os,sys
h=sys.argv[1]
for i, how in enumerate(['fsync', 'fdatasync', 'fsync', 'fdatasync', 'fsync', 'fdatasync']):
  fd=os.open(os.path.join(h, 'f%d' % i), os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600)
  os.write(fd, os.urandom(256 * 1024))
  getattr(os, how)(fd)
  print('f%d' % i, flush=True)
  sys.stdin.readline()
  os.close(fd)
print('done', flush=True)`;
    const script = join(tmp, 'sync.py');
    writeFileSync(script, code, { mode: 0o644 });
    const p = spawn('setpriv', [`--reuid=${U.uid}`, `--regid=${U.gid}`, '--clear-groups', 'python3', script, home], { stdio: ['pipe', 'pipe', 'inherit'], env: { PATH: SYSTEM_PATH } });
    const lines = createInterface({ input: p.stdout });
    const seen: Record<string, [number, number]> = {};
    for await (const line of lines) {
      if (line === 'done') break;
      seen[line] = await extents(join(d.backingOf(T, 'sync'), line));
      p.stdin.write('\n');
    }
    await new Promise((resolve) => (p.exitCode !== null ? resolve(null) : p.once('exit', resolve)));
    expect(p.exitCode).toBe(0);
    // Every file: some extent placed, none delayed.
    expect(Object.entries(seen).filter(([, [placed, delayed]]) => placed === 0 || delayed > 0)).toEqual([]);
    expect(Object.keys(seen)).toHaveLength(6);
  });
});
