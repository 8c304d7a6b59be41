/**
 * Names inside a home that the daemon presents itself. PURE.
 *
 * `.homesfs` at a home's root is a real directory that users may create and
 * write into (e.g. `.homesfs/env.sh`); the daemon reserves only one name in
 * it, `status`: a read-only file generated at open from the home's ledger,
 * limits and last refusals, never stored in the backing tree.
 *
 *  - `/<tenant>/<key>/.homesfs/status` is always answered by JavaScript
 *    (lookup, getattr, open, read): a native fast path for lookup/getattr/
 *    readdir must hand these paths to JavaScript, as well as
 *    `/<tenant>/<key>/.homesfs` itself (it is presented as an empty directory
 *    when it does not exist in the backing tree) and its listing (which adds
 *    `status`). `isReservedPath` says which virtual paths these are.
 *  - When `.homesfs` is absent from the backing tree it is found by lookup
 *    but not listed in the home's root; creating anything in it creates the
 *    backing directory first (charged as one inode).
 *  - Inode numbers: synthetic, with the top bit set (present.ts
 *    SYNTHETIC_INO_BASE), `| STATUS_INO_TAG | serial << 1` for a home's
 *    status file and `| 1` more for its virtual `.homesfs` directory.
 */

export const RESERVED_DIR = '.homesfs';
export const STATUS_NAME = 'status';

/** rel = components below the home root */
export function isStatusPath(rel: readonly string[]): boolean {
  return rel.length === 2 && rel[0] === RESERVED_DIR && rel[1] === STATUS_NAME;
}

export function isReservedDir(rel: readonly string[]): boolean {
  return rel.length === 1 && rel[0] === RESERVED_DIR;
}

/** A mount path (`/tenant/key/...`) that only JavaScript may answer. */
export function isReservedPath(path: string): boolean {
  const parts = path.split('/');
  return parts.length >= 4 && parts[3] === RESERVED_DIR && (parts.length === 4 || (parts.length === 5 && parts[4] === STATUS_NAME));
}
