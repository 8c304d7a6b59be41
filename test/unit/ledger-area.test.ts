import { describe, expect, it } from 'vitest';
import { ABI } from '../../src/abi.js';
import { LedgerArea, type HomeIdentity, type LedgerAreaRaw } from '../../src/fs/ledger-area.js';
import { loadFuse } from '../../src/fuse/binding.js';
import { Ledger, type Limits } from '../../src/policy/ledger.js';

/**
 * The ledgers' area (src/fs/ledger-area.ts) in the binding's real memfd: what
 * one daemon leaves in it, a second mapping of the same memfd (a daemon that
 * resumes after a crash) trusts only where nothing could have changed the home
 * behind the counts. The integration test (crash-ledgers.test.ts) kills a real
 * daemon; here each reason for a scan is taken on its own.
 */

const raw = loadFuse().native as unknown as LedgerAreaRaw;
const OFF: Limits = { maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 0 };
const WHO: HomeIdentity = { dev: 2049n, ino: 1234n, birth: 1_700_000_000_000_000_000n };

/** A daemon's area with home `t/a` built at (100 bytes, 5 inodes); `t/b` too, as a bystander. */
function dying(): { area: LedgerArea; a: ReturnType<LedgerArea['bind']> } {
  const area = LedgerArea.create(raw);
  const a = area.bind('t/a', WHO, true);
  a!.store(100, 5);
  area.bind('t/b', { ...WHO, ino: 99n }, true)!.store(7, 1);
  return { area, a };
}

/** What a daemon resuming after a crash finds (the same memfd, mapped again). */
const resume = (area: LedgerArea) => LedgerArea.kept(raw, area.fd);

describe("the ledgers' area across a crash", () => {
  it('a settled home is taken as it was, with what the binding added and the ledger had not taken', () => {
    const { area, a } = dying();
    a!.pending[ABI.ACCT_GROWN] = 30n;
    a!.pending[ABI.ACCT_RELEASED_BYTES] = 10n;
    a!.pending[ABI.ACCT_RELEASED_INODES] = 1n;
    const next = resume(area);
    expect(next.kept).toEqual({ exact: 2, scanned: 0 });
    const counts = next.adopt('t/a', WHO);
    expect(counts).toEqual({ bytes: 100, inodes: 5 });
    const slot = next.bind('t/a', WHO, true)!;
    const ledger = new Ledger(OFF, counts!, null, slot.pending, slot);
    ledger.takePending();
    expect({ bytes: ledger.bytes, inodes: ledger.inodes }).toEqual({ bytes: 120, inodes: 4 });
    // And the checkpoint holds what the ledger applied: a second crash takes 120/4.
    expect(resume(next).adopt('t/a', WHO)).toEqual({ bytes: 120, inodes: 4 });
  });

  it('a home with a changing request in JavaScript at the kill is scanned; the other home is not', () => {
    const { area } = dying();
    area.track(ABI.OP_WRITE, ['/t/a/file']);
    const next = resume(area);
    expect(next.kept).toEqual({ exact: 1, scanned: 1 });
    expect(next.adopt('t/a', WHO)).toBeNull();
    expect(next.adopt('t/b', { ...WHO, ino: 99n })).toEqual({ bytes: 7, inodes: 1 });
  });

  it('a request answered before the kill leaves the home exact; a read never made it busy', () => {
    const { area } = dying();
    area.track(ABI.OP_MKDIR, ['/t/a/d'])!();
    expect(area.track(ABI.OP_READ, ['/t/a/file'])).toBeUndefined();
    expect(resume(area).adopt('t/a', WHO)).toEqual({ bytes: 100, inodes: 5 });
  });

  it("a rename across homes makes both busy", () => {
    const { area } = dying();
    area.track(ABI.OP_RENAME, ['/t/a/x', '/t/b/y']);
    expect(resume(area).kept).toEqual({ exact: 0, scanned: 2 });
  });

  it('a changing request that names no home (a handle’s) makes every home scanned', () => {
    const { area } = dying();
    area.track(ABI.OP_RELEASE, [7]);
    expect(resume(area).kept).toEqual({ exact: 0, scanned: 2 });
  });

  it("the binding's write or removal in flight makes the home scanned", () => {
    for (const word of [ABI.ACCT_INFLIGHT, ABI.ACCT_BUSY]) {
      const { area, a } = dying();
      a!.pending[word] = 1n;
      const next = resume(area);
      expect(next.adopt('t/a', WHO), `word ${word}`).toBeNull();
      // And the resumed daemon's binding starts from nothing in flight.
      expect(next.bind('t/a', WHO, false)!.pending[word]).toBe(0n);
    }
  });

  it('a ledger between taking the array and storing what it took makes the home scanned', () => {
    const { area, a } = dying();
    a!.busy(1);
    expect(resume(area).adopt('t/a', WHO)).toBeNull();
  });

  it('a home being rescanned at the kill is scanned, and built again it is exact', () => {
    const { area } = dying();
    area.building('t/a');
    expect(resume(area).adopt('t/a', WHO)).toBeNull();
    area.built('t/a');
    expect(resume(area).adopt('t/a', WHO)).toEqual({ bytes: 100, inodes: 5 });
  });

  it('counts are only for the very directory they were counted for', () => {
    for (const other of [{ ...WHO, ino: 1235n }, { ...WHO, dev: 2050n }, { ...WHO, birth: WHO.birth + 1n }]) {
      const { area } = dying();
      expect(resume(area).adopt('t/a', other)).toBeNull();
    }
  });

  it('a deleted home leaves nothing; a renamed one is found under its new name only', () => {
    const { area } = dying();
    area.forget('t/b');
    area.rename('t/a', 't/c');
    const next = resume(area);
    expect(next.adopt('t/b', { ...WHO, ino: 99n })).toBeNull();
    expect(next.adopt('t/a', WHO)).toBeNull();
    expect(next.adopt('t/c', WHO)).toEqual({ bytes: 100, inodes: 5 });
  });

  it('a request in flight while its home is renamed gives its count back to the renamed slot', () => {
    const { area } = dying();
    const done = area.track(ABI.OP_WRITE, ['/t/a/file'])!;
    area.rename('t/a', 't/c');
    done();
    expect(resume(area).adopt('t/c', WHO)).toEqual({ bytes: 100, inodes: 5 });
  });

  it('an area a live upgrade handed over is trusted by no later resume, until the upgrade is abandoned', () => {
    const { area } = dying();
    area.handed();
    const after = resume(area);
    expect(after.kept).toEqual({ exact: 0, scanned: 0 });
    expect(after.adopt('t/a', WHO)).toBeNull();
    const again = dying();
    again.area.handed();
    again.area.live();
    expect(resume(again.area).adopt('t/a', WHO)).toEqual({ bytes: 100, inodes: 5 });
  });

  it('a request in flight for a home that has no slot yet is counted in the slot bind() makes', () => {
    for (const answered of [false, true]) {
      const area = LedgerArea.create(raw);
      const done = area.track(ABI.OP_CREATE, ['/t/new/f'])!;
      area.bind('t/new', WHO, true)!.store(0, 0);
      if (answered) done();
      expect(resume(area).adopt('t/new', WHO), `answered ${answered}`).toEqual(answered ? { bytes: 0, inodes: 0 } : null);
    }
  });

  it('each count is taken once: a second adopt scans', () => {
    const next = resume(dying().area);
    expect(next.adopt('t/a', WHO)).not.toBeNull();
    expect(next.adopt('t/a', WHO)).toBeNull();
  });
});
