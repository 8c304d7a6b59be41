import type { RemovalClaims } from '../fs/removal-claims.js';
import type { FuseClass } from './binding.js';
import type { AddonRaw } from '../addon-raw.js';

type ClaimsAddon = Pick<AddonRaw, 'hs_fastpath_claim_enter' | 'hs_fastpath_claim_leave' | 'hs_fastpath_claim_stats'>;

/** The binding's claim table (native/src/fastpath/claims.c), the one its unlinks use: JS's removers must share it. */
export class NativeRemovalClaims implements RemovalClaims {
  constructor(private readonly addon: ClaimsAddon) {}

  enter(dev: bigint, ino: bigint): void {
    this.addon.hs_fastpath_claim_enter(dev, ino);
  }

  leave(dev: bigint, ino: bigint, gone: boolean): boolean {
    return this.addon.hs_fastpath_claim_leave(dev, ino, gone);
  }

  /** inodes entered and not left; removers that saw nlink 0 after another had settled the inode (each a release it did not repeat) */
  stats(): { inFlight: number; raced: number } {
    return this.addon.hs_fastpath_claim_stats();
  }
}

/** The claim table of the addon the binding loaded (Fuse.native: the same instance, the same table as its unlinks'). */
export function nativeRemovals(Fuse: FuseClass): NativeRemovalClaims {
  return new NativeRemovalClaims(Fuse.native);
}
