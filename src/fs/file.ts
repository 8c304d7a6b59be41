import type { BigIntStats } from 'node:fs';
import { slowToFreeFd } from '../backing/freeing.js';
import * as sys from '../backing/sys.js';
import { ABI } from '../abi.js';
import { HomesError } from '../errors.js';
import { isStatusPath } from '../paths/reserved.js';
import { FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, planFallocate } from '../policy/fallocate.js';
import { effectiveFileMode } from '../policy/profiles.js';
import { reopenRefusal } from '../policy/reopen.js';
import { endsWithIncompleteChar, utf8Check, Utf8StreamValidator, UTF8_CONTEXT_BYTES } from '../policy/utf8.js';
import type { OpenSlot } from '../policy/openfiles.js';
import type { FsContext } from './context.js';
import { homeNodeAttr } from './present.js';
import { withEntry } from './hidden.js';
import { isHiddenName, orphanName } from '../paths/hidden-names.js';
import type { Caller, FileHandle, HomeState, OpenInode } from './state.js';
import { statusText } from './status.js';

const C = sys.C;
const ACCMODE = C.O_RDONLY | C.O_WRONLY | C.O_RDWR;
/** Added to every backing open: never follow, never block on a FIFO swapped in by a race. */
const SAFE = C.O_NOFOLLOW | C.O_NONBLOCK;

export interface OpenResult {
  fh: number;
  directIo: boolean;
  keepCache: boolean;
}

/**
 * Writable handles are opened read-write on the backing side: the UTF-8 check
 * reads the bytes around a write. The kernel only sends reads on descriptors
 * the caller opened for reading, so this widens nothing for the caller.
 */
function backingFlags(flags: number): number {
  const acc = flags & ACCMODE;
  return (acc === C.O_RDONLY ? C.O_RDONLY : C.O_RDWR) | (flags & C.O_APPEND) | SAFE;
}

async function readAt(fd: number, pos: number, len: number): Promise<Buffer> {
  const buf = Buffer.alloc(Math.max(0, len));
  let done = 0;
  while (done < len) {
    const n = await sys.read(fd, buf, done, len - done, pos + done);
    if (n === 0) break;
    done += n;
  }
  return buf.subarray(0, done);
}

/**
 * Text homes: the whole file must decode before anyone reads it (files placed
 * in the backing tree by other means, or left mid-character by a writer).
 */
async function checkTextFile(fd: number, size: number): Promise<{ incompleteTail: boolean }> {
  const v = new Utf8StreamValidator();
  const chunk = Buffer.alloc(64 * 1024);
  for (let pos = 0; pos < size; ) {
    const n = await sys.read(fd, chunk, 0, chunk.length, pos);
    if (n === 0) break;
    if (!v.push(chunk.subarray(0, n))) throw new HomesError('NOT_UTF8', 'file is not valid UTF-8 text', { offset: v.errorOffset });
    pos += n;
  }
  return { incompleteTail: v.midCharacter };
}

/**
 * The write's neighbourhood for utf8Check; throws NOT_UTF8 when the splice
 * would be invalid. `length`: the write's length when `data` only stands for
 * it (a run of zeros: any run of them checks alike).
 */
async function checkTextWrite(h: FileHandle, data: Buffer, start: number, length = data.length): Promise<void> {
  const { inode } = h;
  const size = inode.size;
  const end = start + length;
  const gap = Math.max(0, start - size);
  const preFrom = Math.max(0, Math.min(start, size) - UTF8_CONTEXT_BYTES);
  const prefix = await readAt(h.fd, preFrom, Math.min(start, size) - preFrom);
  const suffix = end < size ? await readAt(h.fd, end, Math.min(UTF8_CONTEXT_BYTES, size - end)) : Buffer.alloc(0);
  const dataEndsAtEof = end >= size;
  const verdict = utf8Check(prefix, data, suffix, { dataEndsAtEof, ...(gap > 0 ? { gap } : {}) });
  if (!verdict.ok) {
    throw new HomesError('NOT_UTF8', 'write would make the file invalid UTF-8 text', { offset: start + verdict.offset });
  }
  if (dataEndsAtEof || suffix.length < UTF8_CONTEXT_BYTES) {
    inode.incompleteTail = verdict.incompleteTail;
    h.leftIncompleteTail = verdict.incompleteTail;
  }
}

function refuseNonRegular(st: BigIntStats): void {
  if (st.isFile()) return;
  if (st.isDirectory()) throw new HomesError('IS_DIR', 'is a directory');
  throw new HomesError('OP_REFUSED', 'only regular files can be opened in a home');
}

/** Must run after the open's last await: the record's size is read inside (see attachInode). */
function attach(ctx: FsContext, hs: HomeState, fd: number, st: BigIntStats, flags: number, rel: readonly string[], slot: OpenSlot): OpenResult {
  const inode = ctx.attachInode(hs, fd, st.dev, st.ino);
  const writable = (flags & ACCMODE) !== C.O_RDONLY;
  inode.handles++;
  if (writable) inode.writers++;
  inode.fds.add(fd);
  const h = ctx.handles.add((fh) => ({ fh, fd, home: hs, inode, writable, append: (flags & C.O_APPEND) !== 0, rel, leftIncompleteTail: false, jsFlush: false, slot, published: 0 }));
  ctx.gateFlush(h);
  ctx.publishData(h);
  ctx.deps.attrs?.handle(h);
  return { fh: h.fh, directIo: hs.profile.directIo, keepCache: false };
}

/**
 * Text homes, a size change that zero-fills or cuts (truncate, fallocate):
 * zeros after a cut character would make it invalid, so a file ending inside
 * a character cannot grow; a cut itself leaves an incomplete tail. Called
 * under the inode's lock with the size the record holds.
 */
async function checkTextResize(inode: OpenInode, fd: number, before: number, size: number): Promise<void> {
  const tailFrom = Math.max(0, Math.min(before, size) - UTF8_CONTEXT_BYTES);
  const tail = await readAt(fd, tailFrom, Math.min(before, size) - tailFrom);
  if (size > before && endsWithIncompleteChar(tail)) {
    throw new HomesError('NOT_UTF8', 'extending a file that ends inside a character would make it invalid UTF-8');
  }
  inode.incompleteTail = size > before ? false : endsWithIncompleteChar(tail);
}

async function truncateInode(ctx: FsContext, hs: HomeState, inode: OpenInode, fd: number, size: number): Promise<void> {
  checkEnd(size);
  await ctx.sizeOp(hs, inode, async () => {
    const before = inode.size;
    if (hs.profile.content === 'utf8') await checkTextResize(inode, fd, before, size);
    const undo = hs.ledger.resize(before, size);
    inode.size = size;
    try {
      await sys.ftruncate(fd, size);
    } catch (err) {
      undo();
      inode.size = before;
      throw err;
    }
  });
}

/** Root's opens are not counted against a uid (the home's and the daemon's caps still apply). */
const NO_CALLER: Caller = { uid: 0, gid: 0, pid: 0 };

/** `reopen`: the session reopens a dead daemon's handle (after a crash), which must reach that inode (policy/reopen.ts). */
export async function open(ctx: FsContext, path: string, flags: number, caller: Caller = NO_CALLER, reopen?: { ino: bigint }): Promise<OpenResult> {
  const vp = ctx.parseInHome(path, 'open');
  if (isStatusPath(vp.rel)) {
    // Mode 0400 keeps the owner's writers out in the kernel; this keeps root's out too.
    if ((flags & ACCMODE) !== C.O_RDONLY || flags & C.O_TRUNC) throw new HomesError('ACCESS_DENIED', '.homesfs/status is read-only');
    const hs = await ctx.home(vp.home);
    // Generated once here: every read of this open sees the same text. Direct I/O: reads come here, whatever size getattr said.
    return { fh: ctx.statusFiles.open(statusText(ctx, hs)), directIo: true, keepCache: false };
  }
  // O_TRUNC truncates even with O_RDONLY on Linux: it changes the size, so it waits for the ledger.
  if ((flags & ACCMODE) === C.O_RDONLY && !(flags & C.O_TRUNC)) {
    const hs = await ctx.home(vp.home);
    const r = await openIn(ctx, hs, vp, flags, caller, reopen && { ...reopen, path });
    // This caller's next read-only opens in the home may be answered by the binding (fuse.nativeOpen).
    ctx.wantCredits(hs, caller.uid);
    return r;
  }
  return ctx.changing(vp.home, (hs) => openIn(ctx, hs, vp, flags, caller, reopen && { ...reopen, path }));
}

async function openIn(ctx: FsContext, hs: HomeState, vp: { dir: readonly string[]; name: string; rel: readonly string[] }, flags: number, caller: Caller, reopen?: { ino: bigint; path: string }): Promise<OpenResult> {
  // Counted before the await that takes a descriptor: every open in flight holds its slot.
  const slot = await ctx.openSlot(hs, caller);
  let fd: number;
  let orphan = false;
  try {
    fd = await withEntry(ctx, hs, vp.dir, vp.name, (_dirFd, entry) => ((orphan = typeof entry !== 'string'), sys.open(entry, backingFlags(flags))));
  } catch (err) {
    slot.release();
    throw err;
  }
  let res: OpenResult;
  try {
    const st = await sys.fstat(fd);
    refuseNonRegular(st);
    if (reopen) refuseReopen(hs, st, flags, caller, reopen.ino);
    // Before an O_TRUNC: refused, the file is as it was (the session's own check at the answer stays behind it).
    if (hs.profile.content === 'utf8' && ctx.deps.passedThrough?.(st.ino)) {
      throw new HomesError('PASSED_THROUGH', 'the file is read by the kernel for opens made before this home became a text home; try again once they are closed');
    }
    if (hs.profile.content === 'utf8' && (flags & ACCMODE) !== C.O_WRONLY && !(flags & C.O_TRUNC)) {
      const open = hs.inodes.get(`${st.dev}:${st.ino}`);
      const text = await checkTextFile(fd, open ? open.size : Number(st.size));
      if (text.incompleteTail) throw new HomesError('NOT_UTF8', 'file ends inside a multi-byte character');
    }
    // An orphan reached by its hidden name (after a crash): its nlink counts a link nobody sees, and
    // its bytes are charged while it is open, as any file unlinked while open (hidden.ts; the scan
    // passes orphans over).
    if (orphan) {
      const inode = ctx.attachInode(hs, fd, st.dev, st.ino);
      inode.orphaned = true;
      if (!inode.unlinked) {
        inode.unlinked = true;
        if (hs.scan === 'done') hs.ledger.hold(inode.size);
      }
    }
    res = attach(ctx, hs, fd, st, flags, vp.rel, slot);
    // A hidden node reopened after a crash (what reached it is its orphan, not the name's form: a user's
    // file of that form is the user's): its later requests by path (fstat, fchmod) are answered from its handles again.
    if (reopen && orphan && !ctx.hidden.has(reopen.path)) ctx.hidden.set(reopen.path, { inode: ctx.handles.get(res.fh).inode, home: hs });
  } catch (err) {
    await sys.close(fd).catch(() => undefined);
    slot.release();
    throw err;
  }
  if (flags & C.O_TRUNC) {
    await truncateInode(ctx, hs, ctx.handles.get(res.fh).inode, fd, 0).catch(async (err) => {
      await release(ctx, res.fh);
      throw err;
    });
  }
  return res;
}

function refuseReopen(hs: HomeState, st: BigIntStats, flags: number, caller: Caller, expectedIno: bigint): void {
  const shown = homeNodeAttr(hs.profile, hs.backing.owner, st, false);
  const refusal = reopenRefusal({
    callerUid: caller.uid,
    callerGid: caller.gid,
    homeOwnerUid: hs.backing.owner.uid,
    expectedIno,
    ino: st.ino,
    uid: shown.uid,
    gid: shown.gid,
    mode: shown.mode,
    accMode: flags & ACCMODE,
  });
  if (refusal) throw new HomesError(refusal.code, `a dead handle is not reopened: ${refusal.reason}`);
}

export async function create(ctx: FsContext, path: string, mode: number, flags: number, caller: Caller): Promise<OpenResult> {
  const vp = ctx.parseInHome(path, 'create');
  return ctx.changing(vp.home, async (hs) => {
    // Before anything is made (a `.homesfs` directory, the file): a refused create changes nothing.
    const slot = await ctx.openSlot(hs, caller);
    try {
      if (flags & ABI.OPEN_TMPFILE) return await createUnnamed(ctx, hs, vp, path, mode, flags & ~ABI.OPEN_TMPFILE, caller, slot);
      await ctx.prepareNewEntry(hs, vp.dir, vp.name, false);
      const r = await createIn(ctx, hs, vp, mode, flags, caller, slot);
      // This caller's next creates in the home may be made by the binding (fuse.nativeCreate).
      ctx.wantCredits(hs, caller.uid, true);
      return r;
    } catch (err) {
      // Idempotent: a handle released by createIn's own clean-up has given it back already.
      slot.release();
      throw err;
    }
  });
}

/**
 * An O_TMPFILE open (the session's CREATE marked ABI.OPEN_TMPFILE, under a
 * hidden name at the home's root: native/src/session/ops_files.c). The file
 * is made straight at that name's orphan, so no directory ever lists it, and
 * is registered as a file unlinked while open (hidden.ts): charged as a
 * create whose name went at once (the inode checked against the budget and
 * given back; the bytes it gets until its last close), unless a LINK names
 * it (dir.ts nameUnnamed). Content, modes and open-file caps are any file's.
 */
async function createUnnamed(
  ctx: FsContext,
  hs: HomeState,
  vp: { dir: readonly string[]; name: string; rel: readonly string[] },
  path: string,
  mode: number,
  flags: number,
  caller: Caller,
  slot: OpenSlot,
): Promise<OpenResult> {
  if (vp.dir.length !== 0 || !isHiddenName(vp.name)) throw new HomesError('IO', `an O_TMPFILE file is made under a hidden name at its home's root, not ${path}`);
  const perms = effectiveFileMode(hs.profile, mode & 0o7777);
  return ctx.store.withDir(hs.backing, [], async (rootFd) => {
    const orphan = sys.fdPathRaw(rootFd, orphanName(vp.name));
    const undo = ctx.addInode(hs);
    let fd: number;
    try {
      fd = await sys.open(orphan, backingFlags(flags) | C.O_CREAT | C.O_EXCL, perms);
    } catch (err) {
      undo();
      throw err;
    }
    try {
      const st = await sys.fstat(fd);
      await ctx.ownNew(hs, rootFd, vp.name, caller, perms, fd);
      const res = attach(ctx, hs, fd, st, flags, vp.rel, slot);
      // Its name went at once: the inode goes back now, the bytes at the last close.
      undo();
      const inode = ctx.handles.get(res.fh)!.inode;
      inode.orphaned = true;
      inode.unlinked = true;
      ctx.hidden.set(path, { inode, home: hs });
      for (const h of ctx.handles.values()) if (h.inode === inode) ctx.deps.attrs?.handle(h);
      return res;
    } catch (err) {
      await sys.close(fd).catch(() => undefined);
      await sys.unlink(orphan).catch(() => undefined);
      throw err;
    }
  });
}

async function createIn(
  ctx: FsContext,
  hs: HomeState,
  vp: { dir: readonly string[]; name: string; rel: readonly string[] },
  mode: number,
  flags: number,
  caller: Caller,
  slot: OpenSlot,
): Promise<OpenResult> {
  return ctx.store.withDir(hs.backing, vp.dir, async (dirFd) => {
    const target = sys.fdPath(dirFd, vp.name);
    let fd: number;
    let created = true;
    const undo = ctx.addInode(hs);
    try {
      await ctx.checkNewEntry(hs, dirFd, vp.dir, vp.name);
      fd = await sys.open(target, backingFlags(flags) | C.O_CREAT | C.O_EXCL, effectiveFileMode(hs.profile, mode & 0o7777));
    } catch (err) {
      undo();
      // O_CREAT without O_EXCL on a name that appeared meanwhile opens the existing file.
      if (sys.sysCode(err) !== 'EEXIST' || flags & C.O_EXCL) throw err;
      created = false;
      fd = await sys.open(target, backingFlags(flags));
    }
    let res: OpenResult;
    try {
      const st = await sys.fstat(fd);
      refuseNonRegular(st);
      // By descriptor: the node just created, whatever the name points to by now.
      if (created) await ctx.ownNew(hs, dirFd, vp.name, caller, effectiveFileMode(hs.profile, mode & 0o7777), fd);
      res = attach(ctx, hs, fd, st, flags, vp.rel, slot);
    } catch (err) {
      await sys.close(fd).catch(() => undefined);
      throw err;
    }
    if (!created && flags & C.O_TRUNC) {
      await truncateInode(ctx, hs, ctx.handles.get(res.fh).inode, fd, 0).catch(async (err) => {
        await release(ctx, res.fh);
        throw err;
      });
    }
    return res;
  });
}

/**
 * Offsets reach JavaScript as doubles: past 2^53 they are no longer exact, so
 * a file may never grow there (EFBIG) and nothing can be read there (EOF).
 * The binding's fast write and native read stop at the same bound (abi.h).
 */
const MAX_OFFSET = ABI.MAX_SAFE_INTEGER;

function checkEnd(end: number): void {
  if (!(end <= MAX_OFFSET)) throw new HomesError('FILE_TOO_LARGE', `offset ${end} is beyond what homesfs can address (2^53 - 1)`);
}

/**
 * The specification of a READ. With `fuse.nativeRead`, handles for which
 * readsNeedNoPolicy holds are answered by the binding's copy of this function
 * (dataplane.c: the same 2^53 bound and short-read loop; a backing error comes
 * here): a policy added here must be reflected in readsNeedNoPolicy.
 */
export async function read(ctx: FsContext, fh: number, buf: Buffer, len: number, pos: number): Promise<number> {
  if (ctx.statusFiles.owns(fh)) return ctx.statusFiles.read(fh, buf, len, pos);
  const h = ctx.handles.get(fh);
  if (!(pos + len <= MAX_OFFSET)) return 0;
  let done = 0;
  // A short read from the backing file is not EOF by itself; keep going until it is.
  while (done < len) {
    const n = await sys.read(h.fd, buf, done, len - done, pos + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

/**
 * One FUSE write request. The budget is checked and reserved synchronously
 * (no await between check and charge), under the file's lock so the size it
 * starts from is exact; a refused request changes nothing, an accepted one is
 * on the backing file before the kernel hears success.
 */
export async function write(ctx: FsContext, fh: number, data: Buffer, pos: number): Promise<number> {
  const n = await writeAt(ctx, fh, data.length, pos, data, (h, start) => sys.write(h.fd, data, 0, data.length, start));
  return n as number;
}

/** writeNative: this write needs its bytes in JavaScript (a text home); nothing was charged. */
export const NEEDS_DATA = Symbol('needs data');

/**
 * The same request for the data plane (fuse.nativeWrite): only offset and
 * length are here, the bytes stay in the binding, which does the pwrite when
 * `proceed(start)` is called and reports its result. The same function as
 * `write` decides and charges, so the ledger rules are one.
 */
export function writeNative(ctx: FsContext, fh: number, len: number, pos: number, proceed: (start: number, wait?: boolean) => Promise<number>): Promise<number | typeof NEEDS_DATA> {
  // A file the binding will own again after this write: its next write must not find JS still holding it
  // (the binding answers a whole write at once, and the kernel's next one would come to JS too, and so on).
  return writeAt(ctx, fh, len, pos, null, (h, start) => proceed(start, ctx.mayHand(h.home, h.inode)));
}

async function writeAt(
  ctx: FsContext,
  fh: number,
  len: number,
  pos: number,
  data: Buffer | null,
  put: (h: FileHandle, start: number) => Promise<number>,
): Promise<number | typeof NEEDS_DATA> {
  const h = ctx.handles.get(fh);
  if (!h.writable) throw new HomesError('BAD_HANDLE', 'handle is not open for writing');
  const { inode, home: hs } = h;
  return ctx.sizeOp(hs, inode, async () => {
    const before = inode.size;
    const start = h.append ? before : pos;
    const end = start + len;
    checkEnd(end);
    const after = Math.max(before, end);
    if (hs.profile.content === 'utf8') {
      // The home became a text home after the handle was published: the check needs the bytes.
      if (data === null) return NEEDS_DATA;
      // Budget first (cheap, synchronous) so a write over budget is not read around
      // for nothing; the real charge follows the content check, which awaits.
      hs.ledger.checkResize(before, after);
      await checkTextWrite(h, data, start);
    }
    const undo = hs.ledger.resize(before, after);
    inode.size = after;
    let n: number;
    try {
      n = await put(h, start);
    } catch (err) {
      undo();
      inode.size = before;
      throw err;
    }
    if (n < len) {
      // The disk took fewer bytes (ENOSPC on the next call): charge only what landed.
      const real = Math.max(before, start + n);
      hs.ledger.resize(after, real);
      inode.size = real;
    }
    return n;
  });
}

export async function ftruncate(ctx: FsContext, fh: number, size: number): Promise<void> {
  const h = ctx.handles.get(fh);
  await truncateInode(ctx, h.home, h.inode, h.fd, size);
  // A cut inside a character is this writer's doing as much as a write of half
  // a one: its close reports it (flush), unless a later write completes it.
  if (h.home.profile.content === 'utf8' && h.writable) h.leftIncompleteTail = h.inode.incompleteTail;
}

export async function truncate(ctx: FsContext, path: string, size: number): Promise<void> {
  const vp = ctx.parseInHome(path, 'truncate');
  await ctx.changing(vp.home, async (hs) => {
    // Read-write: a text home reads the bytes around the cut (a write-only descriptor answered EBADF).
    const fd = await withEntry(ctx, hs, vp.dir, vp.name, (_dirFd, entry) => sys.open(entry, C.O_RDWR | SAFE));
    try {
      const st = await sys.fstat(fd);
      refuseNonRegular(st);
      // The record (existing, or a temporary one that serialises this with any
      // open racing it) is taken after the last await, with its size read then.
      const inode = ctx.attachInode(hs, fd, st.dev, st.ino);
      inode.handles++;
      try {
        await truncateInode(ctx, hs, inode, fd, size);
      } finally {
        ctx.detachInode(hs, inode);
      }
    } finally {
      await sys.close(fd);
    }
  });
}

/** Zeros written per call when a range is zeroed (ZERO_RANGE): one buffer, reused. */
const ZERO_CHUNK = Buffer.alloc(1024 * 1024);

/**
 * fallocate(2), charged by policy/fallocate.ts: exactly the growth of the
 * apparent size. What reaches the backing file is the caller's own request,
 * through the binding (Node has no fallocate): growth reserves its blocks,
 * a punched hole frees them, a zeroed range reads as zeros. A backing
 * filesystem that refuses a mode (EOPNOTSUPP: tmpfs has no ZERO_RANGE, some
 * network filesystems no fallocate at all) gets the calls that give the same
 * result where there are any: growth with ftruncate (its blocks then not
 * reserved ahead), a zeroed range with writes of zeros; a hole it cannot
 * punch stays EOPNOTSUPP, the file unchanged.
 * glibc's posix_fallocate uses mode 0 only.
 */
export async function fallocate(ctx: FsContext, fh: number, mode: number, offset: number, length: number): Promise<void> {
  const h = ctx.handles.get(fh);
  if (!h.writable) throw new HomesError('BAD_HANDLE', 'handle is not open for writing');
  checkEnd(offset + length);
  const { inode, home: hs } = h;
  await ctx.sizeOp(hs, inode, async () => {
    const before = inode.size;
    const plan = planFallocate(mode, offset, length, before);
    switch (plan.action) {
      case 'none':
        return;
      case 'refuse':
        throw new HomesError(plan.code, plan.reason);
      case 'punch':
        // The range reads back as zeros, as after ZERO_RANGE: in a text home its edges must not cut a character.
        if (hs.profile.content === 'utf8') await checkTextWrite(h, ZERO_CHUNK.subarray(0, Math.min(plan.to - plan.from, 4)), plan.from, plan.to - plan.from);
        await ctx.deps.fallocate(h.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, plan.from, plan.to - plan.from);
        return;
      case 'extend': {
        // Zero-fill is an extension like truncate-up: the same incomplete-tail rule.
        if (hs.profile.content === 'utf8') await checkTextResize(inode, h.fd, before, plan.size);
        const undo = hs.ledger.resize(before, plan.size);
        inode.size = plan.size;
        try {
          // The caller's range, allocated (mode 0: holes inside it filled too, which the apparent size already counts).
          await ctx.deps.fallocate(h.fd, 0, offset, plan.size - offset).catch((err: unknown) => {
            if (sys.sysCode(err) !== 'EOPNOTSUPP') throw err;
            return sys.ftruncate(h.fd, plan.size);
          });
        } catch (err) {
          undo();
          inode.size = before;
          throw err;
        }
        return;
      }
      case 'zero': {
        if (hs.profile.content === 'utf8') {
          // Budget first (cheap), as for a write; zeros are ASCII: the range is text, its edges must not cut a character.
          hs.ledger.checkResize(before, plan.size);
          await checkTextWrite(h, ZERO_CHUNK.subarray(0, Math.min(length, 4)), offset, length);
        }
        const undo = hs.ledger.resize(before, plan.size);
        inode.size = plan.size;
        try {
          const zeroed = await ctx.deps.fallocate(h.fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, plan.from, plan.to - plan.from).then(
            () => true,
            (err: unknown) => (sys.sysCode(err) === 'EOPNOTSUPP' ? false : Promise.reject(err)),
          );
          for (let pos = plan.from; !zeroed && pos < plan.to; ) {
            const n = await sys.write(h.fd, ZERO_CHUNK, 0, Math.min(ZERO_CHUNK.length, plan.to - pos), pos);
            if (n === 0) throw new HomesError('IO', 'the backing file took no bytes while a range was zeroed');
            pos += n;
          }
          if (plan.size > before) await sys.ftruncate(h.fd, plan.size);
        } catch (err) {
          // Zeros already written stay (as after a failed write); the size, never changed on disk, and its charge go back.
          undo();
          inode.size = before;
          throw err;
        }
        return;
      }
    }
  });
}

export async function flush(ctx: FsContext, fh: number): Promise<void> {
  // Called on every close of every descriptor (dups, forks, readers): nothing
  // destructive here. The writer that left half a character hears about it at
  // close, unless another writer is still there to complete it. The bytes stay.
  if (ctx.statusFiles.owns(fh)) return;
  const h = ctx.handles.get(fh);
  if (h.home.profile.content === 'utf8' && h.leftIncompleteTail && h.inode.incompleteTail && h.inode.writers <= 1) {
    throw new HomesError('NOT_UTF8', 'file was left ending inside a multi-byte character');
  }
}

export async function fsync(ctx: FsContext, fh: number, datasync: boolean): Promise<void> {
  if (ctx.statusFiles.owns(fh)) return;
  const h = ctx.handles.get(fh);
  await (datasync ? sys.fdatasync(h.fd) : sys.fsync(h.fd));
}

export async function release(ctx: FsContext, fh: number): Promise<void> {
  if (ctx.statusFiles.owns(fh)) return ctx.statusFiles.release(fh);
  const h = ctx.handles.remove(fh);
  if (!h) return;
  // The native fgetattr reads h.fd: it lets go before the descriptor is closed.
  ctx.deps.attrs?.handleGone(fh);
  ctx.ungateFlush(h);
  ctx.unpublishData(h);
  // Out of the set before its close is issued: hidden.ts never picks a descriptor being closed.
  h.inode.fds.delete(h.fd);
  if (h.writable) h.inode.writers--;
  // The last descriptor of an unlinked file frees its blocks when it closes: a big file's on the threadpool.
  // The ledger lets go at once (the caller's close(2) returned long ago, and a write right after
  // must find the bytes); the open-file slot only after the close, so a home has at most its
  // open-file cap of such frees pending.
  const slow = h.inode.unlinked && h.inode.handles === 1 && h.inode.fds.size === 0 && slowToFreeFd(h.fd);
  ctx.detachInode(h.home, h.inode);
  try {
    await (slow ? ctx.slowFrees.close(h.home.backing.id, h.fd) : sys.close(h.fd));
  } finally {
    // Given back once the descriptor is: the count never falls below what the daemon holds.
    h.slot.release();
  }
}

export type { FileHandle };
