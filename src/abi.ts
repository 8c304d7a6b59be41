/**
 * The numbers the native addon and this code must agree on, as native/src/abi.h
 * defines them (test/unit/abi.test.ts compares the two files name by name).
 * The addon exports its own copy as `ABI`; the daemon refuses to start on an
 * addon whose copy differs (an older or newer build): a stale build must not
 * run with half its features silently missing or a slot read as another.
 */
export const ABI = {
  VERSION: 6,
  ACCT_RELEASED_BYTES: 0,
  ACCT_RELEASED_INODES: 1,
  ACCT_GROWN: 2,
  ACCT_CREDIT: 3,
  ACCT_MAXFILE: 4,
  ACCT_INFLIGHT: 5,
  ACCT_REFUND: 6,
  ACCT_LEN: 8,
  OPEN_ON: 1,
  OPEN_DP_READ: 2,
  OPEN_DIRECT_IO: 4,
  OPEN_DP_WRITE: 8,
  REC_OPENED: 1,
  REC_UNUSED: 2,
  REC_CREATED: 3,
  REC_UNUSED_CREATE: 4,
  ATTR_UTIMENS: 1,
  ATTR_CHMOD: 2,
  ATTR_CHOWN_OWNER: 4,
  ATTR_CHOWN_ALLOW: 8,
  DP_READ: 1,
  DP_WRITE: 2,
  WRITE_DECIDE: 0,
  WRITE_DONE: 1,
} as const;

export type AbiName = keyof typeof ABI;

/** What differs between the addon's ABI and ours ([] when they agree). */
export function abiMismatches(native: unknown): string[] {
  if (native === null || typeof native !== 'object') return ['the addon exports no ABI (built before it had one)'];
  const theirs = native as Record<string, unknown>;
  const out: string[] = [];
  if (theirs.VERSION !== ABI.VERSION) out.push(`ABI version ${String(theirs.VERSION)}, this daemon needs ${ABI.VERSION}`);
  for (const [name, value] of Object.entries(ABI)) {
    if (name !== 'VERSION' && theirs[name] !== value) out.push(`${name} is ${String(theirs[name])} in the addon, ${value} here`);
  }
  for (const name of Object.keys(theirs)) if (!(name in ABI)) out.push(`${name} is in the addon only`);
  return out;
}
