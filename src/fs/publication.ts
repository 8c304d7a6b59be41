/**
 * What the binding is told about homes and handles, and when: whether it
 * opens, creates and unlinks in a home (hs.nativeOpen, nativeCreate,
 * nativeUnlink), which handles' FLUSHes must reach JS (the flush gate) and
 * which descriptors its data plane may read and write. Every change is
 * published before anything that depends on it is answered, and a home's
 * policy change republishes all of it at once (policyChanged), so the binding
 * never answers from state JavaScript has left behind.
 */
import { DP_READ, DP_WRITE, NATIVE_OPEN_DIRECT_IO, NATIVE_OPEN_ON, NATIVE_OPEN_READ, NATIVE_OPEN_WRITE, readsNeedNoPolicy, SYMLINK_RULE, writesNeedNoData, type DataPlaneStats } from './native-api.js';
import { OpenSlots } from './open-slots.js';
import type { FileHandle, HomeState } from './state.js';

export abstract class NativePublication extends OpenSlots {
  /**
   * Published to the binding (setFlushGate): slot fh & 0xffff counts the open
   * handles in it whose FLUSH must reach JS. Every other FLUSH (one per close
   * of every descriptor) is answered on a session worker thread: flush is a no-op in
   * JS unless the handle writes into a text home, which checks the tail.
   */
  readonly flushGate = new Uint16Array(65536);

  /** (Re)publish whether the handle's FLUSH needs JS: before the open is answered, and whenever its home's profile changes. */
  override gateFlush(h: FileHandle): void {
    const want = h.writable && h.home.profile.content === 'utf8';
    if (want === h.jsFlush) return;
    h.jsFlush = want;
    const slot = h.fh & 0xffff;
    this.flushGate[slot] = this.flushGate[slot]! + (want ? 1 : -1);
  }

  ungateFlush(h: FileHandle): void {
    if (!h.jsFlush) return;
    h.jsFlush = false;
    const slot = h.fh & 0xffff;
    this.flushGate[slot] = this.flushGate[slot]! - 1;
  }

  /**
   * (Re)publish the handle's descriptor to the data plane for what needs no
   * JavaScript (reads without policy, writes decided without their data), or
   * take it back: before the open is answered, and whenever its home's profile
   * changes.
   */
  override publishData(h: FileHandle): void {
    const dp = this.deps.dataPlane;
    if (!dp) return;
    const p = h.home.profile;
    const want = (dp.read && readsNeedNoPolicy(p) ? DP_READ : 0) | (dp.write && h.writable && writesNeedNoData(p) ? DP_WRITE : 0);
    if (want === h.published) return;
    if (h.published === 0) dp.publish(h.fh, h.fd, want, h.inode.dev, h.inode.ino, h.append);
    else if (want === 0) dp.unpublish(h.fh);
    else dp.setFlags(h.fh, want);
    h.published = want;
    // No size change of JS's own in progress: the binding may decide this file's writes from now on.
    if ((want & DP_WRITE) !== 0 && h.inode.lock.queued === 0) this.handSize(h.home, h.inode);
  }

  /** Before the handle's descriptor is closed: no native read or write may use it afterwards. */
  unpublishData(h: FileHandle): void {
    if (h.published === 0) return;
    h.published = 0;
    this.deps.dataPlane!.unpublish(h.fh);
  }

  /** Counters of the data plane, null when it is off. */
  dataPlaneStats(): DataPlaneStats | null {
    return this.deps.dataPlane ? this.deps.dataPlane.stats() : null;
  }

  /** A home's profile or budget changed (control socket, reload): republish what depends on it. */
  policyChanged(hs: HomeState): void {
    hs.policyEpoch++;
    // The binding opens and creates nothing more under the old policy (and what it opened before is
    // served no more natively until adopted, see dataplane.c), then every handle it opened meanwhile is
    // adopted here and published anew with the rest: no handle writes or reads under the old policy
    // natively once the change is answered.
    this.refreshNativeOpen(hs);
    this.settle();
    for (const h of this.handles.values()) {
      if (h.home !== hs) continue;
      this.gateFlush(h);
      this.publishData(h);
      this.deps.attrs?.handle(h);
    }
    this.deps.attrs?.republish(hs);
    // Last: when the kernel asks again, every answer (native ones too) is the new presentation.
    this.homePresentationChanged(hs.backing.ref);
  }

  /**
   * Whether the binding answers read-only opens in the home: it has the
   * native open, the home is loaded and not retired, and no read there needs
   * policy (binary content, so an open is only the walk and the regular-file
   * check, see file.ts openIn). Told to the binding before anything that
   * changed it is answered.
   */
  override refreshNativeOpen(hs: HomeState): void {
    const attrs = this.deps.attrs;
    const on = attrs !== undefined && attrs.opens && this.loaded.has(hs) && !hs.backing.retired && hs.profile.content !== 'utf8';
    const flags = on
      ? NATIVE_OPEN_ON |
        (this.deps.dataPlane?.read && readsNeedNoPolicy(hs.profile) ? NATIVE_OPEN_READ : 0) |
        (this.deps.dataPlane?.write && writesNeedNoData(hs.profile) ? NATIVE_OPEN_WRITE : 0) |
        (hs.profile.directIo ? NATIVE_OPEN_DIRECT_IO : 0)
      : 0;
    // Its maxOpenFiles (which directory handles there count against) may be new too.
    this.publishOpenFiles(hs, 0);
    if (flags !== hs.nativeOpen) {
      hs.nativeOpen = flags;
      attrs?.openPolicy(hs);
    }
    this.refreshNativeCreate(hs);
  }

  /**
   * Whether the binding makes new files in the home (createIn for a name that
   * does not exist): it opens there, the home is mutable (ledger built, no
   * rescan, no tenant budget: what native unlinks need too), no per-directory
   * entry limit needs a listing, and the new file's mode has the form
   * (asked & m) | or (fileModeMasks). Its owner on disk is diskOwner's: the
   * home's owner, or with chown 'allow' the caller, a setgid parent's group
   * kept (ownNew). New directories too (mkdir, with a create slot's inode)
   * where effectiveDirMode has that form (dirModeMasks), and hard links of
   * regular files (link, with a create slot's inode) where the profile does
   * not deny them (the one rule of dir.ts link's the binding cannot look up;
   * the others it checks as JS does or leaves to JS). Told to the binding
   * before anything that changed it is answered; off, its create slots come
   * back with their inodes.
   */
  refreshNativeCreate(hs: HomeState): void {
    this.refreshNativeRename(hs);
    const attrs = this.deps.attrs;
    const masks = attrs?.creates && hs.nativeOpen !== 0 && hs.nativeUnlink && hs.profile.maxEntriesPerDir === 0 ? attrs.fileModeMasks(hs.profile) : null;
    // New directories too (mkdir in dir.ts), where the binding has them and effectiveDirMode has the form.
    const dir = masks && attrs?.mkdirs ? attrs.dirModeMasks(hs.profile) : null;
    // New symlinks too (symlink in dir.ts): where the profile has them, judged as linkStaysInside judges a relative target.
    const symlinks = masks && attrs?.symlinks ? SYMLINK_RULE[hs.profile.symlinks] : 0;
    // Hard links too (link in dir.ts), where the profile does not deny them.
    const link = masks !== null && attrs?.links === true && hs.profile.hardLinks !== 'deny';
    const want = masks ? { ...masks, maxDepth: hs.profile.maxDepth, callerOwns: hs.profile.chown === 'allow', dir, symlinks, link } : null;
    const was = hs.nativeCreate;
    const sameDir = (a: { m: number; or: number } | null, b: { m: number; or: number } | null) => (a === null ? b === null : b !== null && a.m === b.m && a.or === b.or);
    const same =
      want === null
        ? was === null
        : was !== null && want.m === was.m && want.or === was.or && want.maxDepth === was.maxDepth && want.callerOwns === was.callerOwns && sameDir(want.dir, was.dir) && want.symlinks === was.symlinks && want.link === was.link;
    if (same) return;
    hs.nativeCreate = want;
    attrs?.createPolicy(hs);
  }

  /**
   * Whether the binding renames regular files in the home (dir.ts rename for
   * a file not open, over nothing or over a regular file not open): it
   * unlinks there (the same ledger conditions: a replaced file is released as
   * an unlinked one), the content is binary, and no per-directory entry limit
   * needs a listing; the target's depth is checked against maxDepth there.
   * Told to the binding before anything that changed it is answered (called
   * wherever native creates are decided again: the open policy, mutability).
   */
  refreshNativeRename(hs: HomeState): void {
    const attrs = this.deps.attrs;
    const on = attrs?.renames === true && hs.nativeUnlink && hs.profile.content !== 'utf8' && hs.profile.maxEntriesPerDir === 0;
    const want = on ? { maxDepth: hs.profile.maxDepth } : null;
    const was = hs.nativeRename;
    if (want === null ? was === null : was !== null && was.maxDepth === want.maxDepth) return;
    hs.nativeRename = want;
    attrs?.renamePolicy(hs);
  }

  /**
   * Whether the binding may unlink in the home now: its ledger is built and
   * no rescan holds the gate (a walk must see a still tree), and its tenant
   * has no budget (the pool's checks need every home's bytes at once, see
   * policy/ledger.ts). Turning it off returns once no native unlink of the
   * home is in flight, and the ledger has taken what they released.
   */
  override refreshNativeUnlink(hs: HomeState): void {
    const attrs = this.deps.attrs;
    const want =
      attrs !== undefined && attrs.unlinks && this.loaded.has(hs) && !hs.backing.retired && hs.scan === 'done' && !hs.gateClosed && (hs.ledger.pool?.limit ?? 0) === 0;
    this.setNativeUnlink(hs, want);
  }

  private setNativeUnlink(hs: HomeState, on: boolean): void {
    if (on === hs.nativeUnlink) return;
    hs.nativeUnlink = on;
    // Byte credit goes with it: taken back first, then the binding waits for the writes that took some (mutable(hs)).
    if (!on) hs.ledger.reclaimBytes();
    // Made immutable, the binding gives its create slots back (hs_fastpath_set_mutable) and makes no more files there.
    this.deps.attrs?.mutable(hs);
    if (!on) hs.ledger.takePending();
    this.refreshNativeCreate(hs);
  }

  /** A tenant budget is set or changed: its homes' unlinks come to JS first while it is on. */
  setTenantLimit(tenant: string, limit: number): void {
    const pool = this.pool(tenant);
    const homes = [...this.loaded].filter((hs) => hs.backing.ref.tenant === tenant);
    // Before a limit applies, so that no check of it ever misses a native removal.
    if (limit > 0) for (const hs of homes) this.setNativeUnlink(hs, false);
    pool.setLimit(limit);
    for (const hs of homes) this.refreshNativeUnlink(hs);
  }
}
