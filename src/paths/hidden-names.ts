import { ABI } from '../abi.js';

/**
 * The names the session hides a file unlinked while open under (its last
 * name went while a handle still uses it): abi.h's prefix and hex digits,
 * made by native/src/session/nodes.c (native/src/abi.h), and the name of the
 * orphan that keeps such a file's inode at the root of its home until the
 * last release (fs/hidden.ts). PURE.
 *
 * An orphan's name is the hidden name behind one byte 0xff: not UTF-8, so it
 * is never listed, never looked up and never made through the mount (paths
 * arrive as UTF-8: no path names it), while the scan measures it as any
 * backing name, byte for byte. A user's own file with a name of that form is
 * an ordinary file: only the session's flags (fs/dir.ts rename `hide`, unlink
 * `hidden`) make a hiding or its unlink.
 */

/** native/src/abi.h HIDDEN_PREFIX */
export const HIDDEN_NAME_PREFIX: string = ABI.HIDDEN_PREFIX;
/** The prefix, then HIDDEN_DIGITS lowercase hex digits (session/nodes.c hs_node_hidden_name). */
export const HIDDEN_NAME = new RegExp(`^${HIDDEN_NAME_PREFIX.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}[0-9a-f]{${ABI.HIDDEN_DIGITS}}$`);

export function isHiddenName(name: string): boolean {
  return HIDDEN_NAME.test(name);
}

const ORPHAN_MARK = 0xff;

/** The backing name of the orphan of hidden name `hidden`. */
export function orphanName(hidden: string): Buffer {
  return Buffer.concat([Buffer.from([ORPHAN_MARK]), Buffer.from(hidden, 'latin1')]);
}

/** Whether a raw backing name is an orphan's. */
export function isOrphanName(raw: Buffer): boolean {
  return raw.length > 1 && raw[0] === ORPHAN_MARK && isHiddenName(raw.subarray(1).toString('latin1'));
}
