import type { RemovalClaims } from '../fs/removals.js';
import { NativeBindingError, type FuseClass } from './binding.js';

interface ClaimsAddon {
  fastpath_claim_enter(dev: bigint, ino: bigint): void;
  fastpath_claim_leave(dev: bigint, ino: bigint, gone: boolean): boolean;
  fastpath_claim_stats(): { inFlight: number; raced: number };
}

/** The binding's claim table (native/src/fastpath/claims.c), the one its unlinks use: JS's removers must share it. */
export class NativeRemovalClaims implements RemovalClaims {
  constructor(private readonly addon: ClaimsAddon) {}

  enter(dev: bigint, ino: bigint): void {
    this.addon.fastpath_claim_enter(dev, ino);
  }

  leave(dev: bigint, ino: bigint, gone: boolean): boolean {
    return this.addon.fastpath_claim_leave(dev, ino, gone);
  }

  /** inodes entered and not left; removers that saw nlink 0 after another had settled the inode (each a release it did not repeat) */
  stats(): { inFlight: number; raced: number } {
    return this.addon.fastpath_claim_stats();
  }
}

/**
 * The claim table of the addon the binding loaded (Fuse.native: the same
 * instance, the same table as its unlinks'). loadFuse has checked its ABI, so
 * the functions are there.
 */
export function nativeRemovals(Fuse: FuseClass): NativeRemovalClaims {
  const addon = (Fuse.native ?? {}) as Partial<ClaimsAddon>;
  if (typeof addon.fastpath_claim_enter !== 'function' || typeof addon.fastpath_claim_leave !== 'function' || typeof addon.fastpath_claim_stats !== 'function') {
    throw new NativeBindingError('the native addon has no removal claims; rebuild it: node scripts/build-native.mjs');
  }
  return new NativeRemovalClaims(addon as ClaimsAddon);
}
