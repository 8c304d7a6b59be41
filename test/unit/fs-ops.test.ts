import { constants as C } from 'node:fs';
import { lstat, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BackingStore } from '../../dist/backing/store.js';
import { HomesError } from '../../dist/errors.js';
import * as attr from '../../dist/fs/attr.js';
import { FsContext } from '../../dist/fs/context.js';
import * as dir from '../../dist/fs/dir.js';
import * as file from '../../dist/fs/file.js';
import type { ProfileChoice } from '../../dist/fs/home-registry.js';
import type { Caller } from '../../src/fs/state.js';
import type { HomeRef } from '../../src/paths/parse.js';
import { BUILTIN_PROFILES } from '../../dist/policy/profiles.js';
import { loadFuse } from '../../dist/fuse/binding.js';
import { nativeRenameat2 } from '../../dist/fuse/mount.js';

/**
 * The operations of src/fs on a real backing directory, without a mount: the
 * layer is FUSE-independent by design, so what it decides (charges, refusals
 * and their errnos, containment) is tested here call by call, and the mounted
 * suites test what the kernel and real programs make of it. Run as root (the
 * store refuses anything else and chowns to owners), as CI runs. From dist/:
 * the ledger scan runs on a worker thread, which loads its module from there.
 */
const OWNER = { uid: 4242, gid: 4242 };
const CALLER: Caller = { ...OWNER, pid: process.pid };
const notUsed = () => Promise.reject(new Error('not used by these tests'));
/** renameat2 through the addon (calls.c), as the daemon has it */
const renameat2 = nativeRenameat2(loadFuse());
const asRoot = process.getuid?.() === 0;

interface Fixture {
  dir: string;
  ctx: FsContext;
  choose: (ref: HomeRef, c: Partial<ProfileChoice['limits']> & { profile?: 'home' | 'scratch' | 'posix' }) => void;
  refused: (p: Promise<unknown>) => Promise<{ code: string; errno: number }>;
  usage: (home: string) => Promise<{ bytes: number; inodes: number }>;
}

async function fixture(): Promise<Fixture> {
  const d = await mkdtemp(join(tmpdir(), 'homesfs-fsops-'));
  const log = pino({ level: 'silent' });
  const store = new BackingStore(join(d), log, () => OWNER);
  await store.init();
  const choices = new Map<string, ProfileChoice>();
  const profileFor = (ref: HomeRef): ProfileChoice => {
    const c = choices.get(`${ref.tenant}/${ref.key}`);
    if (c) return c;
    const p = BUILTIN_PROFILES.home;
    return { name: 'home', profile: p, limits: { maxHomeBytes: p.maxHomeBytes, maxInodes: p.maxInodes, maxFileBytes: p.maxFileBytes } };
  };
  const ctx = new FsContext({ store, log, profileFor, tenantBudgetFor: () => 0, utimensat: notUsed, mknod: notUsed, fallocate: notUsed, renameat2, mountRoot: '/homes' });
  for (const key of ['a', 'b']) await store.createHome({ tenant: 't', key }, OWNER);
  return {
    dir: d,
    ctx,
    choose: (ref, c) => {
      const name = c.profile ?? 'home';
      const p = BUILTIN_PROFILES[name];
      choices.set(`${ref.tenant}/${ref.key}`, {
        name,
        profile: p,
        limits: { maxHomeBytes: c.maxHomeBytes ?? p.maxHomeBytes, maxInodes: c.maxInodes ?? p.maxInodes, maxFileBytes: c.maxFileBytes ?? p.maxFileBytes },
      });
    },
    refused: async (p) => {
      const err = await p.then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(HomesError);
      return { code: (err as HomesError).code, errno: (err as HomesError).errno };
    },
    usage: async (home) => {
      const [tenant, key] = home.split('/') as [string, string];
      const hs = await ctx.readyHome({ tenant, key });
      return { bytes: hs.ledger.bytes, inodes: hs.ledger.inodes };
    },
  };
}

describe.skipIf(!asRoot)('fs operations without a mount', () => {
  let f: Fixture;
  beforeEach(async () => {
    f = await fixture();
  });
  afterEach(async () => {
    await f.ctx.close();
    await rm(f.dir, { recursive: true, force: true });
  });

  const put = async (path: string, data: string | Buffer, pos = 0) => {
    const o = await file.create(f.ctx, path, 0o644, C.O_WRONLY | C.O_CREAT, CALLER);
    try {
      return await file.write(f.ctx, o.fh, Buffer.from(data), pos);
    } finally {
      await file.release(f.ctx, o.fh);
    }
  };

  it('charges what it makes: bytes and inodes in the ledger, the owner and mode on disk', async () => {
    await dir.mkdir(f.ctx, '/t/a/src', 0o777, CALLER);
    expect(await put('/t/a/src/main.c', 'int main;\n')).toBe(10);
    expect(await f.usage('t/a')).toEqual({ bytes: 10, inodes: 2 });
    const st = await lstat(join(f.dir, 't/a/src/main.c'));
    expect([st.uid, st.mode & 0o7777]).toEqual([OWNER.uid, 0o600]);
    expect((await attr.getattr(f.ctx, '/t/a/src/main.c')).size).toBe(10n);
    await dir.unlink(f.ctx, '/t/a/src/main.c');
    await dir.rmdir(f.ctx, '/t/a/src');
    expect(await f.usage('t/a')).toEqual({ bytes: 0, inodes: 0 });
  });

  it('a write over the budget is EDQUOT and changes neither the file nor the ledger', async () => {
    f.choose({ tenant: 't', key: 'a' }, { maxHomeBytes: 100 });
    await put('/t/a/f', 'x'.repeat(60));
    const o = await file.open(f.ctx, '/t/a/f', C.O_WRONLY, CALLER);
    const r = await f.refused(file.write(f.ctx, o.fh, Buffer.alloc(50, 'y'), 60));
    await file.release(f.ctx, o.fh);
    expect(r).toEqual({ code: 'QUOTA_EXCEEDED', errno: 122 }); // EDQUOT
    expect(await f.usage('t/a')).toEqual({ bytes: 60, inodes: 1 });
    expect((await readFile(join(f.dir, 't/a/f'))).length).toBe(60);
  });

  it('a file over the per-file cap is EFBIG, a home over its inode cap EDQUOT: nothing made', async () => {
    f.choose({ tenant: 't', key: 'a' }, { maxFileBytes: 8, maxInodes: 2 });
    const o = await file.create(f.ctx, '/t/a/big', 0o600, C.O_WRONLY | C.O_CREAT, CALLER);
    expect((await f.refused(file.write(f.ctx, o.fh, Buffer.alloc(9), 0))).errno).toBe(27); // EFBIG
    await file.release(f.ctx, o.fh);
    await dir.mkdir(f.ctx, '/t/a/d', 0o700, CALLER);
    expect((await f.refused(dir.mkdir(f.ctx, '/t/a/e', 0o700, CALLER))).errno).toBe(122); // EDQUOT
    expect((await readdir(join(f.dir, 't/a'))).sort()).toEqual(['big', 'd']);
    expect(await f.usage('t/a')).toEqual({ bytes: 0, inodes: 2 });
  });

  it('a rename between homes is EXDEV; names past NAME_MAX and the reserved .homesfs are refused', async () => {
    await put('/t/a/f', 'data');
    expect((await f.refused(dir.rename(f.ctx, '/t/a/f', '/t/b/f', CALLER))).errno).toBe(18); // EXDEV
    expect(await readdir(join(f.dir, 't/b'))).toEqual([]);
    expect((await f.refused(dir.mkdir(f.ctx, `/t/a/${'n'.repeat(256)}`, 0o700, CALLER))).errno).toBe(36); // ENAMETOOLONG
    // the status file is the daemon's: it can only be read
    expect((await f.refused(dir.unlink(f.ctx, '/t/a/.homesfs/status'))).code).toBe('OP_REFUSED');
    expect(await f.usage('t/a')).toEqual({ bytes: 4, inodes: 1 });
    expect(await f.usage('t/b')).toEqual({ bytes: 0, inodes: 0 });
  });

  it('a rename within a home moves the charge with the name; over an existing file it frees the old one', async () => {
    await put('/t/a/x', '12345');
    await put('/t/a/y', '123');
    await dir.rename(f.ctx, '/t/a/x', '/t/a/y', CALLER);
    expect(await f.usage('t/a')).toEqual({ bytes: 5, inodes: 1 });
    expect(await readFile(join(f.dir, 't/a/y'), 'utf8')).toBe('12345');
  });

  it('renameat2 flags: NOREPLACE never replaces, EXCHANGE swaps without touching the ledger, other flags are EINVAL first', async () => {
    await put('/t/a/x', '12345');
    await put('/t/a/y', '123');
    const code = (p: Promise<unknown>) => p.then(() => 'ok', (e: unknown) => (e as { code?: string }).code);
    expect(await code(dir.rename(f.ctx, '/t/a/x', '/t/a/y', CALLER, false, dir.RENAME_NOREPLACE))).toBe('EEXIST');
    expect(await readFile(join(f.dir, 't/a/y'), 'utf8')).toBe('123');
    expect(await f.usage('t/a')).toEqual({ bytes: 8, inodes: 2 });
    await dir.rename(f.ctx, '/t/a/x', '/t/a/y', CALLER, false, dir.RENAME_EXCHANGE);
    expect(await readFile(join(f.dir, 't/a/x'), 'utf8')).toBe('123');
    expect(await readFile(join(f.dir, 't/a/y'), 'utf8')).toBe('12345');
    expect(await f.usage('t/a')).toEqual({ bytes: 8, inodes: 2 });
    expect(await code(dir.rename(f.ctx, '/t/a/x', '/t/a/none', CALLER, false, dir.RENAME_EXCHANGE))).toBe('ENOENT');
    await dir.rename(f.ctx, '/t/a/x', '/t/a/z', CALLER, false, dir.RENAME_NOREPLACE);
    expect((await readdir(join(f.dir, 't/a'))).sort()).toEqual(['y', 'z']);
    // RENAME_WHITEOUT, and NOREPLACE|EXCHANGE: EINVAL, even between two homes (the kernel's order)
    for (const flags of [4, 3, 5, 8]) {
      expect((await f.refused(dir.rename(f.ctx, '/t/a/y', '/t/b/y', CALLER, false, flags))).errno).toBe(22);
    }
    expect((await f.refused(dir.rename(f.ctx, '/t/a/y', '/t/b/y', CALLER, false, dir.RENAME_EXCHANGE))).errno).toBe(18); // EXDEV
    expect(await f.usage('t/a')).toEqual({ bytes: 8, inodes: 2 });
    // The helper's home rename takes no flags: EINVAL, and its admission stays for its own request.
    let renamed = 0;
    f.ctx.admission = { pid: CALLER.pid, from: '/t/a', to: '/t/c', onRenamed: () => void renamed++ };
    expect((await f.refused(dir.rename(f.ctx, '/t/a', '/t/c', CALLER, false, dir.RENAME_NOREPLACE))).errno).toBe(22);
    expect(f.ctx.admission).not.toBeNull();
    expect(renamed).toBe(0);
    f.ctx.admission = null;
  });

  it('scratch: text only (EILSEQ for a broken UTF-8 write, nothing kept) and no links (EPERM)', async () => {
    f.choose({ tenant: 't', key: 'b' }, { profile: 'scratch' });
    await put('/t/b/notes.md', 'ok\n');
    const o = await file.open(f.ctx, '/t/b/notes.md', C.O_WRONLY, CALLER);
    expect((await f.refused(file.write(f.ctx, o.fh, Buffer.from([0x6f, 0xc3, 0x28]), 3))).errno).toBe(84); // EILSEQ
    await file.release(f.ctx, o.fh);
    expect(await readFile(join(f.dir, 't/b/notes.md'), 'utf8')).toBe('ok\n');
    expect((await f.refused(dir.symlink(f.ctx, 'notes.md', '/t/b/l', CALLER))).errno).toBe(1); // EPERM
    expect((await f.refused(dir.link(f.ctx, '/t/b/notes.md', '/t/b/h'))).errno).toBe(1);
    expect(await f.usage('t/b')).toEqual({ bytes: 3, inodes: 1 });
  });

  it('home: a link that leads out of the home is refused, one that stays in is made and read back', async () => {
    await dir.symlink(f.ctx, 'sub/f', '/t/a/in', CALLER);
    expect(await attr.readlink(f.ctx, '/t/a/in')).toBe('sub/f');
    // out by climbing, and (conservatively: "sub" may itself be a link) by a ".." after a name
    for (const target of ['../b/secret', 'sub/../../b/secret', 'sub/../f', '/etc/shadow']) {
      expect((await f.refused(dir.symlink(f.ctx, target, '/t/a/out', CALLER))).errno, target).toBe(1);
    }
    expect((await readdir(join(f.dir, 't/a'))).sort()).toEqual(['in']);
    expect(await f.usage('t/a')).toEqual({ bytes: 0, inodes: 1 });
  });

  it("operations on the daemon's tree are refused before they touch the backing", async () => {
    expect((await f.refused(dir.mkdir(f.ctx, '/t/c', 0o700, CALLER))).code).toBe('DAEMON_TREE');
    expect((await f.refused(dir.rmdir(f.ctx, '/t/a'))).code).toBe('DAEMON_TREE');
    expect((await readdir(join(f.dir, 't'))).sort()).toEqual(['a', 'b']);
  });
});
