import { spawnSync } from 'node:child_process';
import fs, { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { removeTree } from '../../src/backing/store.js';
import { entryPath, runWalkSync, syncIo, walkSteps} from '../../src/backing/walk.js';
import { walkTree } from '../../src/fs/scan-walk.js';

const O_PATH = 0o10000000;

/** A chain `depth` levels deep of `d/`, each level with a file `f` (1 byte) and, if `comb`, a directory `z` holding `g` (2 bytes). */
function chain(root: string, depth: number, comb: boolean): void {
  const py = `
import os, sys
os.chdir(sys.argv[1])
for i in range(int(sys.argv[2])):
    os.mkdir('d')
    if sys.argv[3] == '1':
        os.mkdir('z'); open('z/g', 'w').write('gg')
    open('f', 'w').write('f')
    os.chdir('d')
`;
  const r = spawnSync('python3', ['-c', py, root, String(depth), comb ? '1' : '0']);
  expect(r.status, r.stderr.toString()).toBe(0);
}

const openDir = (p: string) => openSync(p, O_PATH | fs.constants.O_DIRECTORY);

// Issue 8, item 4: every whole-tree walk is iterative with a bounded number of descriptors.
describe('bounded tree walk', () => {
  const base = mkdtempSync(join(tmpdir(), 'homesfs-treewalk-'));
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  it('scans a 1000-level comb exactly, with few descriptors open and no recursion', () => {
    const root = join(base, 'comb');
    mkdirSync(root);
    chain(root, 1000, true);
    const fd = openDir(root);
    try {
      const r = walkTree(fs, fd, new Set(), () => undefined);
      // per level: d, f, z, z/g
      expect(r.inodes).toBe(4 * 1000);
      expect(r.bytes).toBe(1000 * (1 + 2));
      expect(r.walk!.depth).toBe(1000);
      expect(r.walk!.dirs).toBe(2 * 1000);
      // ~8 per doubling of the distance: 8·(1 + log2(1000/8)) ≈ 64
      expect(r.walk!.maxOpen).toBeLessThanOrEqual(80);
      const tight = walkTree(fs, fd, new Set(), () => undefined, { window: 1 });
      expect(tight).toMatchObject({ inodes: r.inodes, bytes: r.bytes });
      expect(tight.walk!.maxOpen).toBeLessThanOrEqual(13);
      expect(tight.walk!.reopened).toBeGreaterThan(0);
    } finally {
      closeSync(fd);
    }
  });

  it('removes a 1000-level comb with every descriptor closed afterwards', async () => {
    const root = join(base, 'comb');
    const before = readdirSync('/proc/self/fd').length;
    const fd = openDir(base);
    try {
      await removeTree(fd, Buffer.from('comb'));
    } finally {
      closeSync(fd);
    }
    expect(existsSync(root)).toBe(false);
    expect(readdirSync('/proc/self/fd').length).toBe(before);
  });

  it('a directory renamed or swapped for a symlink during the walk is dropped, never followed out of the tree', () => {
    const root = join(base, 'race');
    const outside = join(base, 'outside');
    mkdirSync(join(outside, 'd'), { recursive: true });
    writeFileSync(join(outside, 'd', 'secret'), 'keep');
    mkdirSync(join(root, 'a'), { recursive: true });
    chain(join(root, 'a'), 40, false);
    const fd = openDir(root);
    const seen: string[] = [];
    let swapped = false;
    try {
      const io = syncIo(fs, {
        visit: (dirFd, e, depth) => {
          seen.push(fs.readlinkSync(`/proc/self/fd/${dirFd}`));
          if (depth === 41 && !swapped) {
            // at the bottom, with the upper levels' descriptors closed (window 1): swap `a`
            swapped = true;
            renameSync(join(root, 'a'), join(root, 'moved'));
            symlinkSync(outside, join(root, 'a'));
          }
          if (!e.isDirectory()) fs.unlinkSync(entryPath(dirFd, e.name));
          return e.isDirectory();
        },
        leave: (parentFd, name) => fs.rmdirSync(entryPath(parentFd, name)),
      });
      const stats = runWalkSync(walkSteps(fd, { leave: true, window: 1 }), io);
      expect(swapped).toBe(true);
      expect(stats.lost).toBeGreaterThan(0);
    } finally {
      closeSync(fd);
    }
    expect(readFileSafe(join(outside, 'd', 'secret'))).toBe('keep');
    expect(seen.every((p) => p.startsWith(root))).toBe(true);
  });

  it('walks and removes 6000 levels without a stack overflow (the recursive walks overflowed at 5000)', async () => {
    const root = join(base, 'very');
    mkdirSync(root);
    const r = spawnSync('python3', ['-c', `
import os, sys
os.chdir(sys.argv[1])
for i in range(6000):
    os.mkdir('d'); os.chdir('d')
`, root]);
    expect(r.status).toBe(0);
    const fd = openDir(root);
    try {
      const s = walkTree(fs, fd, new Set(), () => undefined);
      expect(s.inodes).toBe(6000);
      expect(s.walk!.maxOpen).toBeLessThanOrEqual(100);
    } finally {
      closeSync(fd);
    }
    const bfd = openDir(base);
    try {
      await removeTree(bfd, Buffer.from('very'));
    } finally {
      closeSync(bfd);
    }
    expect(existsSync(root)).toBe(false);
  });
});

function readFileSafe(p: string): string {
  return fs.readFileSync(p, 'utf8');
}
