/**
 * Values as the session's C reads them (native/src/session/marshal.c): a stat
 * and a statfs as uint32 words, an open's options as bits.
 */
import { ABI } from '../abi.js';

export type StatLike = {
  mode?: number | bigint;
  uid?: number | bigint;
  gid?: number | bigint;
  size?: number | bigint;
  dev?: number | bigint;
  nlink?: number | bigint;
  ino?: number | bigint;
  rdev?: number | bigint;
  blksize?: number | bigint;
  blocks?: number | bigint;
  atimeNs?: bigint;
  mtimeNs?: bigint;
  ctimeNs?: bigint;
};

const u32 = (v: unknown): number => (typeof v === 'bigint' ? Number(BigInt.asUintN(32, v)) : typeof v === 'number' && Number.isFinite(v) ? v >>> 0 : 0);

function put64(w: Uint32Array, at: number, v: unknown): void {
  const b = BigInt.asUintN(64, typeof v === 'bigint' ? v : typeof v === 'number' && Number.isFinite(v) ? BigInt(Math.trunc(v)) : 0n);
  w[at] = Number(b & 0xffffffffn);
  w[at + 1] = Number(b >> 32n);
}

const NS = 1_000_000_000n;

/** A time in ns (default: now) as int64 seconds (floor, so times before 1970 work) and nanoseconds. */
function putTime(w: Uint32Array, at: number, ns: bigint | undefined): void {
  const t = ns ?? BigInt(Date.now()) * 1_000_000n;
  let sec = t / NS;
  let nsec = t % NS;
  if (nsec < 0n) {
    nsec += NS;
    sec -= 1n;
  }
  put64(w, at, sec);
  w[at + 2] = Number(nsec);
}

/** A stat as ABI.STAT_WORDS uint32 (the layout marshal.c reads). */
export function statWords(s: StatLike): Uint32Array {
  const w = new Uint32Array(ABI.STAT_WORDS);
  w[0] = u32(s.mode);
  w[1] = u32(s.uid);
  w[2] = u32(s.gid);
  put64(w, 3, s.size);
  w[5] = u32(s.dev);
  w[6] = s.nlink === undefined ? 1 : u32(s.nlink);
  put64(w, 7, s.ino);
  w[9] = u32(s.rdev);
  w[10] = u32(s.blksize);
  put64(w, 11, s.blocks);
  putTime(w, 13, s.atimeNs);
  putTime(w, 16, s.mtimeNs);
  putTime(w, 19, s.ctimeNs);
  return w;
}

type StatfsLike = Partial<Record<'bsize' | 'frsize' | 'blocks' | 'bfree' | 'bavail' | 'files' | 'ffree' | 'favail' | 'fsid' | 'flag' | 'namemax', number | bigint>>;

export function statfsWords(s: StatfsLike): Uint32Array {
  const keys = ['bsize', 'frsize', 'blocks', 'bfree', 'bavail', 'files', 'ffree', 'favail', 'fsid', 'flag', 'namemax'] as const;
  return Uint32Array.from(keys, (k) => u32(s[k]));
}

export type OpenOpts = { directIo?: boolean; keepCache?: boolean; nonseekable?: boolean };

export const openBits = (o: OpenOpts | undefined): number =>
  (o?.directIo ? ABI.OPEN_OPT_DIRECT_IO : 0) | (o?.keepCache ? ABI.OPEN_OPT_KEEP_CACHE : 0) | (o?.nonseekable ? ABI.OPEN_OPT_NONSEEKABLE : 0);

