/**
 * Open-file records (OpenInode): the charged size of each regular file open
 * in a home, and who owns that size, JavaScript or the binding (handed over
 * for writes it decides from the ledger's byte credit, taken back before any
 * size change of JS's own); and the accounting of a node whose last name went
 * away, whose bytes stay charged until its last close. A record's size is read
 * synchronously when it is created and every change goes through it, so no
 * decision is made from a size an await made stale.
 */
import { fstatSync } from 'node:fs';
import { SlowFrees } from '../backing/freeing.js';
import * as sys from '../backing/sys.js';
import { HomesError } from '../errors.js';
import { HomeRegistry } from './home-registry.js';
import { writesNeedNoData } from './native-api.js';
import { JsRemovalClaims, type RemovalClaims } from './removal-claims.js';
import { Mutex, inodeKey, type HomeState, type OpenInode } from './state.js';

/** One remover of a name of an inode, entered in the claim table (OpenInodes.enterRemoval) until it leaves. */
export interface Removing {
  dev: bigint;
  ino: bigint;
  left: boolean;
}

/**
 * Byte credit a home keeps for the binding's write decisions (grantBytes):
 * under a budget, topped up to this when half is used, and never more than a
 * quarter of the free room; with no budget, a sum no home writes between two
 * requests JS serves. Each exhaustion costs one write's round trip to JS.
 */
const BYTE_CREDIT_CHUNK = 64 * 1024 * 1024;
const BYTE_CREDIT_MIN = 64 * 1024;
const BYTE_CREDIT_UNLIMITED = 2 ** 40;

export abstract class OpenInodes extends HomeRegistry {
  /** unlinks, renames-over and last closes that may free many blocks: off the JS thread, bounded per home */
  readonly slowFrees = new SlowFrees();
  /** who of several removers of an inode's last names settles it (removal-claims.ts): the binding's table, shared with its unlinks */
  readonly removals: RemovalClaims = this.deps.removals ?? new JsRemovalClaims();

  /**
   * The open-file record for the inode behind `fd`, created on first open.
   * A new record's size is read here, synchronously, with no await between the
   * read and the record becoming visible: a size read earlier (before an await)
   * may predate a truncate or write that finished meanwhile, and a record built
   * from it would let later writes up to that size pass as uncharged
   * overwrites. Once the record exists, every size change goes through it.
   * An inode whose last name is gone and that has no record was already given
   * back to the ledger by the unlink or rename that removed it: the open lost
   * that race and answers ENOENT.
   */
  attachInode(hs: HomeState, fd: number, dev: bigint, ino: bigint): OpenInode {
    const key = inodeKey(dev, ino);
    let inode = hs.inodes.get(key);
    if (!inode) {
      // Told to the binding first (its size is the ledger's from now on: the native getattr
      // must ask JS, and a native unlink must leave it to JS), then nlink read: a native
      // unlink either saw it open or removed the last name before this fstat.
      this.deps.attrs?.inode(dev, ino, 1);
      // fstat of an open descriptor on the local backing disk: metadata only, microseconds.
      const st = fstatSync(fd, { bigint: true });
      if (st.nlink === 0n) {
        this.deps.attrs?.inode(dev, ino, -1);
        throw new HomesError('NOT_FOUND', 'the file was removed while it was being opened');
      }
      inode = this.newInode(hs, dev, ino, Number(st.size));
    }
    return inode;
  }

  /**
   * The record of a file a live upgrade handed over open (handover.ts), or
   * the one this daemon has of it already. A new one is told to the binding
   * as attachInode's is; its size is what the disk holds, which the start-up
   * scan counts. A file with no name left (`linked` false) keeps its bytes
   * charged until its last close: a ledger built already holds them now, one
   * being built takes them at its end (scan.ts), a failed one at the rescan
   * that rebuilds it.
   */
  adoptInode(hs: HomeState, dev: bigint, ino: bigint, size: number, linked: boolean): OpenInode {
    const known = hs.inodes.get(inodeKey(dev, ino));
    if (known) return known;
    this.deps.attrs?.inode(dev, ino, 1);
    const inode = this.newInode(hs, dev, ino, size);
    if (!linked) {
      inode.unlinked = true;
      // A handed-over ledger counts it already (the predecessor's).
      if (hs.scan === 'done' && !hs.ledgerHanded) hs.ledger.hold(size);
    }
    return inode;
  }

  /** A new open-file record of hs, with its charged size published to the binding (which already counts the inode open). */
  protected newInode(hs: HomeState, dev: bigint, ino: bigint, initial: number, madeNatively = false): OpenInode {
    // Every change of the charged size reaches the binding's table too: the
    // accessor makes one that forgets to tell it impossible.
    const attrs = this.deps.attrs;
    let size = initial;
    // Only a file the binding made can be its own before JS has a record of it (hs_fastpath_set_write_credit).
    const owned = madeNatively && attrs?.writeDecisions ? attrs.wlSize(dev, ino) : -1;
    const inode: OpenInode = {
      key: inodeKey(dev, ino),
      dev,
      ino,
      get size() {
        if (inode.delegated) {
          const v = attrs!.wlSize(dev, ino);
          if (v >= 0) return v;
        }
        return size;
      },
      set size(v: number) {
        if (inode.delegated) throw new HomesError('IO', 'internal: a size the binding owns was set in JavaScript');
        size = v;
        attrs?.inodeSize(dev, ino, v);
      },
      delegated: owned >= 0,
      handles: 0,
      writers: 0,
      unlinked: false,
      orphaned: false,
      incompleteTail: false,
      lock: new Mutex(),
      fds: new Set(),
    };
    if (!inode.delegated) attrs?.inodeSize(dev, ino, size);
    hs.inodes.set(inode.key, inode);
    return inode;
  }

  /**
   * A size change of JS's own (a write it decides, truncate, fallocate):
   * under the file's lock, with the size taken back from the binding first,
   * and handed over again after when nothing else waits for the lock.
   */
  sizeOp<T>(hs: HomeState, inode: OpenInode, fn: () => Promise<T>): Promise<T> {
    // Only a handle a live upgrade handed over can be open for writing before its home's ledger is
    // built (an open that may change a size waits for it, file.ts): its size changes wait too, so
    // they are charged to the ledger the start-up scan builds, never to the empty one before it.
    if (hs.scan !== 'done') return this.ledgerBuilt(hs).then(() => this.sizeOp(hs, inode, fn));
    return inode.lock.run(async () => {
      if (inode.delegated) await this.takeSize(inode);
      try {
        return await fn();
      } finally {
        if (inode.lock.queued === 1) this.handSize(hs, inode);
      }
    });
  }

  /** The charged size back from the binding; a write it decided may still be in flight (no new one starts): wait it out. */
  private async takeSize(inode: OpenInode): Promise<void> {
    for (let tries = 0; ; tries++) {
      if (this.takeSizeNow(inode)) return;
      // One pwrite on a session worker thread: yield to the event loop, then back off to a millisecond.
      await new Promise<void>((resolve) => (tries < 16 ? setImmediate(resolve) : setTimeout(resolve, 1)));
    }
  }

  /** Take the size back if no write the binding decided is in flight on it (false: ask again soon; no new one starts meanwhile). */
  private takeSizeNow(inode: OpenInode): boolean {
    const v = this.deps.attrs!.wlRevoke(inode.dev, inode.ino);
    if (v === -1) return false;
    inode.delegated = false;
    if (v >= 0) inode.size = v;
    return true;
  }

  /**
   * Hand the inode's charged size to the binding, which from now on decides
   * the growth of writes through handles published DP_WRITE, from byte credit
   * the ledger reserved (grantBytes). Only in binary homes with the data
   * plane's writes on; a file nobody writes is left to JS.
   */
  handSize(hs: HomeState, inode: OpenInode): void {
    if (inode.delegated || !this.mayHand(hs, inode)) return;
    const size = inode.size;
    if (!this.deps.attrs!.wlDelegate(inode.dev, inode.ino, size, hs.pending)) return;
    inode.delegated = true;
    this.grantBytes(hs);
  }

  /** Whether handSize would hand the inode over (so a write JS decides for it waits for JS's end before its answer: writeAt). */
  mayHand(hs: HomeState, inode: OpenInode): boolean {
    return this.deps.attrs?.writeDecisions === true && this.deps.dataPlane?.write === true && inode.writers > 0 && writesNeedNoData(hs.profile) && hs.inodes.get(inode.key) === inode;
  }

  /**
   * Keep the home's byte credit topped up: bytes of the budget the binding
   * may charge writes' growth from without asking (policy/ledger.ts). At most
   * a quarter of the free room and BYTE_CREDIT_CHUNK; only where native
   * removals are on too (ledger built, no rescan, no tenant budget). Taken
   * back before any growth would be refused.
   */
  grantBytes(hs: HomeState): void {
    if (!hs.nativeUnlink || !this.deps.attrs?.writeDecisions) return;
    const ledger = hs.ledger;
    const have = ledger.credit;
    const max = ledger.limits.maxHomeBytes;
    // Below a soft limit, credit stops at it: the write that crosses it is decided (and warned about) here, at once.
    const soft = ledger.soft().bytes;
    const softRoom = soft.soft > 0 && !soft.over ? soft.soft - ledger.bytes - ledger.reservedBytes : Infinity;
    if (max === 0 && softRoom === Infinity) {
      if (have < BYTE_CREDIT_UNLIMITED / 2) ledger.reserveBytes(BYTE_CREDIT_UNLIMITED - have);
      return;
    }
    if (have >= BYTE_CREDIT_CHUNK / 2) return;
    const free = max === 0 ? Infinity : max - ledger.bytes - ledger.reservedBytes;
    const add = Math.min(BYTE_CREDIT_CHUNK - have, Math.floor(free / 4), softRoom);
    if (add >= BYTE_CREDIT_MIN) ledger.reserveBytes(add);
  }

  /**
   * Before a removal (unlink, rename over it) that may take a name of the node
   * `st` describes, whose descriptor the caller holds until it has called
   * removal, or leaveRemoval if the removal failed.
   */
  enterRemoval(st: { dev: bigint; ino: bigint }): Removing {
    this.removals.enter(st.dev, st.ino);
    return { dev: st.dev, ino: st.ino, left: false };
  }

  /** A removal that did not happen (or whose outcome was settled): out of the claim table, once. */
  leaveRemoval(r: Removing, gone = false): boolean {
    if (r.left) return false;
    r.left = true;
    return this.removals.leave(r.dev, r.ino, gone);
  }

  /**
   * Account for a node whose name went away (unlink, rename over it). `nodeFd`
   * is an O_PATH descriptor of the node, read after the removal and
   * synchronously here, so nlink and size are current when the decision
   * is made (an fstat awaited earlier could predate the last write of a handle
   * that closed meanwhile). An open file keeps its bytes until last close.
   * Two removals of one name never interleave (the kernel holds the parent
   * directory's lock across the FUSE unlink/rename request), but two names of
   * one inode can go at once: `r` (enterRemoval, before the removal) makes one
   * of the removers that see nlink 0 settle the bytes.
   */
  settleRemoved(hs: HomeState, nodeFd: number, r: Removing, unseenLinks = 0): void {
    this.removal(hs, nodeFd, r, unseenLinks)();
  }

  /**
   * settleRemoved's decision, with what the ledger gives back returned rather
   * than applied: for a caller whose descriptor is the file's last reference,
   * which frees the blocks when it closes (closeRemoved).
   */
  removal(hs: HomeState, nodeFd: number, r: Removing, unseenLinks = 0): () => void {
    let st;
    try {
      st = fstatSync(nodeFd, { bigint: true });
    } catch (err) {
      // It does not fail on an O_PATH descriptor; if it did, this remover settles nothing.
      this.leaveRemoval(r);
      throw err;
    }
    // `unseenLinks`: links that are no name (a hiding's orphan, hidden.ts).
    const settles = this.leaveRemoval(r, st.nlink === BigInt(unseenLinks));
    // Every name counts as an inode (a hard link is one more, see scan-walk.ts): the
    // one that went is given back whatever remains. The bytes go with the last name,
    // or with the last close of a file still open: once, however many names went at the same time.
    const inode = settles ? hs.inodes.get(inodeKey(st.dev, st.ino)) : undefined;
    if (inode) inode.unlinked = true;
    const bytes = settles && !inode && st.isFile() ? Number(st.size) : 0;
    return () => {
      if (bytes > 0) hs.ledger.release(bytes);
      hs.ledger.removeInode();
    };
  }

  /**
   * Close the O_PATH descriptor of a removed node, `release` (from removal)
   * applied. The descriptor may be the file's last reference, and its close
   * frees the blocks: for a file slowToFree (checked before the removal) on the
   * threadpool, the ledger letting go once they are free; otherwise at once.
   */
  async closeRemoved(hs: HomeState, nodeFd: number, slow: boolean, release: (() => void) | null): Promise<void> {
    if (!slow) {
      release?.();
      return sys.close(nodeFd);
    }
    try {
      await this.slowFrees.close(hs.backing.id, nodeFd);
    } finally {
      release?.();
    }
  }

  /** Drop one handle's claim on an inode; the last close of an unlinked file frees its bytes (its inode went with its name). */
  detachInode(hs: HomeState, inode: OpenInode): void {
    inode.handles--;
    if (inode.handles > 0) return;
    // The last handle is gone, so no write of it is in flight (unpublish waited for it): the size comes back at once.
    if (inode.delegated && !this.takeSizeNow(inode)) this.log.error({ home: hs.backing.id, ino: String(inode.ino) }, 'the binding still writes a file whose last handle is gone');
    hs.inodes.delete(inode.key);
    this.deps.attrs?.inode(inode.dev, inode.ino, -1);
    // Its name was given back when it went (removal): what is left is the bytes.
    if (inode.unlinked) hs.ledger.release(inode.size);
  }
}
