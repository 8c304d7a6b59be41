import fs, { closeSync, linkSync, mkdirSync, mkdtempSync, openSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { walkTree } from '../../src/fs/scan-walk.js';

const O_PATH = 0o10000000;

// The worker around walkTree runs from dist/ only; the daemon's integration tests use it.
describe('scan walk', () => {
  const root = mkdtempSync(join(tmpdir(), 'homesfs-walk-'));
  const outside = mkdtempSync(join(tmpdir(), 'homesfs-walk-out-'));
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  });
  mkdirSync(join(root, 'a/b'), { recursive: true });
  writeFileSync(join(root, 'a/f'), 'x'.repeat(10));
  writeFileSync(join(root, 'a/b/g'), 'y'.repeat(5));
  linkSync(join(root, 'a/f'), join(root, 'a/b/f-link'));
  writeFileSync(join(outside, 'big'), 'z'.repeat(1000));
  symlinkSync(outside, join(root, 'a/out')); // never followed
  writeFileSync(Buffer.from(`${root}/bad-\xff`, 'latin1'), 'q'); // not UTF-8: measured all the same

  const key = (p: string) => {
    const st = fs.lstatSync(p, { bigint: true });
    return `${st.dev}:${st.ino}`;
  };

  it('counts every name as an inode and each inode\'s bytes once, never follows a symlink, and leaves excluded files to the caller', () => {
    const fd = openSync(root, O_PATH | fs.constants.O_DIRECTORY);
    try {
      const progress: number[] = [];
      const all = walkTree(fs, fd, new Set(), (p) => progress.push(p.inodes));
      // names: a, a/b, a/f, a/b/f-link (the same file: its bytes once), a/b/g, a/out, bad-\xff
      expect(all).toMatchObject({ bytes: 10 + 5 + 1, inodes: 7, excluded: [] });
      const k = key(join(root, 'a/b/g'));
      expect(walkTree(fs, fd, new Set([k]), () => undefined)).toMatchObject({ bytes: 10 + 1, inodes: 7, excluded: [k] });
    } finally {
      closeSync(fd);
    }
  });
});
