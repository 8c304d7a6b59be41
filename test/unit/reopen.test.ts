import { describe, expect, it } from 'vitest';
import { reopenRefusal, type ReopenFacts } from '../../src/policy/reopen.js';

const OWNER = 1_000_123;
const base: ReopenFacts = { callerUid: OWNER, callerGid: OWNER, homeOwnerUid: OWNER, expectedIno: 77n, ino: 77n, uid: OWNER, gid: OWNER, mode: 0o600, accMode: 0 };

describe("a dead handle's reopen (policy/reopen.ts)", () => {
  it.each([
    ['the owner, its own 0600 file, read', {}, null],
    ['the owner, read-write', { accMode: 2 }, null],
    ['root (a writeback WRITE)', { callerUid: 0, callerGid: 0, accMode: 1 }, null],
    ['another inode at the path', { ino: 78n }, 'IO'],
    ['another inode, even for root', { ino: 78n, callerUid: 0, callerGid: 0 }, 'IO'],
    ["another uid: the home's root keeps it out", { callerUid: OWNER + 1, callerGid: OWNER + 1, mode: 0o666 }, 'ACCESS_DENIED'],
    ['the owner, a 0400 file, for writing', { mode: 0o400, accMode: 1 }, 'ACCESS_DENIED'],
    ['the owner, a 0200 file, for reading', { mode: 0o200 }, 'ACCESS_DENIED'],
    ['the owner, a 0400 file, read-write', { mode: 0o400, accMode: 2 }, 'ACCESS_DENIED'],
    ['the owner, a file of another uid (posix), by its group bits', { uid: OWNER + 5, mode: 0o640 }, null],
    ['the owner, a file of another uid and group, by the other bits', { uid: OWNER + 5, gid: OWNER + 5, mode: 0o604 }, null],
    ['the owner, a file of another uid and group, other bits none', { uid: OWNER + 5, gid: OWNER + 5, mode: 0o660 }, 'ACCESS_DENIED'],
  ] as Array<[string, Partial<ReopenFacts>, string | null]>)('%s', (_name, change, code) => {
    expect(reopenRefusal({ ...base, ...change })?.code ?? null).toBe(code);
  });
});
