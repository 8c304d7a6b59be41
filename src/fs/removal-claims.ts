/**
 * Which remover of an inode's last names gives its bytes back. Names of one
 * inode in different directories can go at the same time (the kernel
 * serialises removals per parent directory only), so several removers' fstat
 * after their unlink or rename-over may see nlink 0; the one whose removal took
 * the last name always does. Every remover enters the inode before its
 * removal, holding a descriptor of it, and leaves after its fstat: of those
 * that saw nlink 0, the first to leave settles the inode (its bytes, or its
 * record's if the file is still open), the others nothing. Each that sees 0 is
 * registered across the moment nlink reached 0, so the claim outlives them all;
 * the entry goes with the last registrant, and meanwhile their descriptors
 * keep the inode number from being reused.
 *
 * With native unlinks, C's and JS's removers must use one table: the binding's
 * (native/src/fastpath/claims.c, through src/fuse/native-claims.ts). This one is for a
 * context with JS's removers alone.
 */
export interface RemovalClaims {
  /** before the removal that may take a name of (dev, ino); throws when no entry can be made */
  enter(dev: bigint, ino: bigint): void;
  /** after it and the fstat (gone: nlink 0); true for the one remover that settles the inode */
  leave(dev: bigint, ino: bigint, gone: boolean): boolean;
}

export class JsRemovalClaims implements RemovalClaims {
  private readonly entries = new Map<string, { refs: number; claimed: boolean }>();

  enter(dev: bigint, ino: bigint): void {
    const key = `${dev}:${ino}`;
    const e = this.entries.get(key);
    if (e) e.refs++;
    else this.entries.set(key, { refs: 1, claimed: false });
  }

  leave(dev: bigint, ino: bigint, gone: boolean): boolean {
    const key = `${dev}:${ino}`;
    const e = this.entries.get(key);
    if (!e) return false;
    const settles = gone && !e.claimed;
    if (settles) e.claimed = true;
    if (--e.refs === 0) this.entries.delete(key);
    return settles;
  }

  /** inodes entered and not left */
  get inFlight(): number {
    return this.entries.size;
  }
}
