import { spawnSync } from 'node:child_process';
import fs, { closeSync, linkSync, mkdirSync, mkdtempSync, openSync, rmSync, symlinkSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { entryPath, runWalkSync, syncIo, walkSteps } from '../../src/backing/walk.js';
import { walkTreeNative } from '../../src/fs/scan-native.js';
import { walkTree, type ScanResult } from '../../src/fs/scan-walk.js';
import { loadLister, nameAt, type Lister } from '../../src/fs/scandir.js';

const O_PATH = 0o10000000;
const openDir = (p: string | Buffer) => openSync(p, O_PATH | fs.constants.O_DIRECTORY);

/** mulberry32: the same tree for a seed, so a failure can be rebuilt */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Names as raw bytes; some not UTF-8 (a lone 0xff, a truncated sequence), some with spaces or newlines. */
function name(r: () => number, i: number): Buffer {
  const odd = [Buffer.from([0xff]), Buffer.from([0xe2, 0x82]), Buffer.from(' \n'), Buffer.from('é')];
  const base = Buffer.from(`n${i}`);
  return r() < 0.25 ? Buffer.concat([base, odd[Math.floor(r() * odd.length)]!]) : base;
}

const join2 = (dir: Buffer, n: Buffer) => Buffer.concat([dir, Buffer.from('/'), n]);

/**
 * A random tree under `root`: files of many sizes (sparse, so large ones cost
 * nothing), hard links within it (and to a file outside, so nlink > 1 with one
 * name here), symlinks in, out and dangling, FIFOs, sockets, nested and deep
 * directories, names that are not UTF-8. Returns some regular files' keys.
 */
function buildTree(root: string, outside: string, seed: number): string[] {
  const r = rng(seed);
  const dirs: Buffer[] = [Buffer.from(root)];
  const files: Buffer[] = [];
  const sockets: Buffer[] = [];
  const fifos: Buffer[] = [];
  let n = 0;
  for (let i = 0; i < 300; i++) {
    const dir = dirs[Math.floor(r() * dirs.length)]!;
    const p = join2(dir, name(r, n++));
    const k = r();
    if (k < 0.15) {
      mkdirSync(p);
      dirs.push(p);
    } else if (k < 0.55) {
      writeFileSync(p, '');
      const s = r();
      truncateSync(p, s < 0.3 ? 0 : s < 0.8 ? Math.floor(r() * 10_000) : Math.floor(r() * 2 ** 40));
      files.push(p);
    } else if (k < 0.7 && files.length > 0) {
      linkSync(files[Math.floor(r() * files.length)]!, p);
    } else if (k < 0.75) {
      linkSync(join(outside, 'big'), p);
    } else if (k < 0.85) {
      const targets = [outside, join(outside, 'big'), '..', 'nowhere', files[0]?.toString('latin1') ?? '.'];
      symlinkSync(targets[Math.floor(r() * targets.length)]!, p);
    } else if (k < 0.9) {
      fifos.push(p);
    } else if (k < 0.93) {
      sockets.push(dir);
    } else {
      // a chain deeper than the walk's window, so directories are closed and reopened
      let d = p;
      mkdirSync(d);
      for (let j = 0; j < 20 + Math.floor(r() * 20); j++) {
        writeFileSync(join2(d, Buffer.from('f')), 'x'.repeat(j));
        d = join2(d, name(r, n++));
        mkdirSync(d);
      }
      dirs.push(d);
    }
  }
  // FIFOs and sockets from python, given paths in hex (they are bytes). A
  // socket's path must fit in 108 bytes: bound by name from its directory.
  const py = [
    'import os,socket,sys',
    'for a in sys.argv[1:]:',
    '  kind, p = a.split(":")',
    '  if kind == "f": os.mkfifo(bytes.fromhex(p))',
    '  else: os.chdir(bytes.fromhex(p)); socket.socket(socket.AF_UNIX).bind(b"sock%d" % len(os.listdir(".")))',
  ].join('\n');
  const args = [...fifos.map((p) => `f:${p.toString('hex')}`), ...sockets.map((d) => `s:${d.toString('hex')}`)];
  const out = spawnSync('python3', ['-c', py, ...args]);
  expect(out.status, out.stderr.toString()).toBe(0);
  return files.filter(() => r() < 0.1).map((f) => {
    const st = fs.lstatSync(f, { bigint: true });
    return `${st.dev}:${st.ino}`;
  });
}

const lister = loadLister();

/** Types, hard-linked files and non-UTF-8 names in the tree, from the JS walk. */
function census(rootFd: number): { types: Set<number>; linked: number; oddNames: number } {
  const out = { types: new Set<number>(), linked: 0, oddNames: 0 };
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  runWalkSync(
    walkSteps(rootFd),
    syncIo(fs, {
      visit: (dirFd, e) => {
        const st = fs.lstatSync(entryPath(dirFd, e.name));
        out.types.add((st.mode >> 12) & 15);
        if (st.isFile() && st.nlink > 1) out.linked++;
        try {
          utf8.decode(e.name);
        } catch {
          out.oddNames++;
        }
        return st.isDirectory();
      },
    }),
  );
  return out;
}

/** What both walkers must agree on (the order of excluded keys is the walk's). */
const facts = (s: ScanResult) => ({ bytes: s.bytes, inodes: s.inodes, excluded: [...s.excluded].sort(), dirs: s.walk?.dirs, depth: s.walk?.depth });

describe('native scan lister (scandir.node)', () => {
  const base = mkdtempSync(join(tmpdir(), 'homesfs-scandir-'));
  const outside = join(base, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'big'), 'z'.repeat(1000));
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  it('is built and loads', () => {
    expect(lister).not.toBeNull();
  });

  for (const seed of [1, 2, 3, 4]) {
    it(`measures random tree ${seed} exactly as the JS walk does`, () => {
      const root = join(base, `t${seed}`);
      mkdirSync(root);
      const keys = buildTree(root, outside, seed);
      const fd = openDir(root);
      try {
        // the tree holds what it is meant to test (else a seed proves little)
        const kinds = census(fd);
        expect(kinds.types).toEqual(new Set([1, 4, 8, 10, 12]));
        expect(kinds.linked).toBeGreaterThan(0);
        expect(kinds.oddNames).toBeGreaterThan(0);
        for (const window of [2, 8]) {
          for (const exclude of [new Set<string>(), new Set(keys)]) {
            const js = walkTree(fs, fd, exclude, () => undefined, { window });
            const native = walkTreeNative(fs, lister!, fd, exclude, () => undefined, { window });
            expect(native.scanner).toBe('native');
            expect(facts(native)).toEqual(facts(js));
          }
        }
      } finally {
        closeSync(fd);
      }
    });
  }

  it('lists raw names and lstat facts, never following a symlink', () => {
    const root = join(base, 'facts');
    mkdirSync(root);
    const bad = Buffer.from(`${root}/bad-\xff`, 'latin1');
    writeFileSync(bad, 'q');
    symlinkSync(outside, join(root, 'out'));
    const fd = openDir(root);
    try {
      const l = lister!.hs_sys_scandir(fd);
      const byName = new Map<string, number>();
      for (let i = 0; i < l.count; i++) byName.set(nameAt(l, i).toString('latin1'), i);
      expect([...byName.keys()].sort()).toEqual(['bad-\xff', 'out']);
      const b = byName.get('bad-\xff')!;
      const st = fs.lstatSync(bad, { bigint: true });
      expect([l.type[b], l.size[b], l.nlink[b], l.dev[b], l.ino[b]]).toEqual([8, 1, 1, st.dev, st.ino]);
      expect(l.type[byName.get('out')!]).toBe(10);
    } finally {
      closeSync(fd);
    }
  });

  it('throws ENOTDIR-like codes the walk treats as gone, for a descriptor that is not a directory', () => {
    const f = join(base, 'plain');
    writeFileSync(f, '');
    const fd = openSync(f, O_PATH);
    try {
      expect(() => lister!.hs_sys_scandir(fd)).toThrow(expect.objectContaining({ code: 'ENOTDIR' }));
    } finally {
      closeSync(fd);
    }
  });

  it('skips an entry that vanished between listing and stat, as walkTree skips a failed lstat', () => {
    const root = join(base, 'vanish');
    mkdirSync(root);
    for (const f of ['a', 'b', 'c']) writeFileSync(join(root, f), 'x'.repeat(7));
    const fd = openDir(root);
    try {
      // scandir.c lists and stats in one call, so the race is staged: b goes
      // right after the real listing, which then reports it as the C code
      // does when its fstatat fails (type 0)
      let staged = false;
      const racing: Lister = {
        hs_sys_scandir(dirFd) {
          const l = lister!.hs_sys_scandir(dirFd);
          for (let i = 0; !staged && i < l.count; i++) {
            if (nameAt(l, i).toString() !== 'b') continue;
            unlinkSync(join(root, 'b'));
            l.type[i] = 0;
            staged = true;
          }
          return l;
        },
      };
      const native = walkTreeNative(fs, racing, fd, new Set(), () => undefined);
      expect(staged).toBe(true);
      expect(facts(native)).toEqual(facts(walkTree(fs, fd, new Set(), () => undefined)));
      expect(native).toMatchObject({ bytes: 14, inodes: 2 });
    } finally {
      closeSync(fd);
    }
  });
});
