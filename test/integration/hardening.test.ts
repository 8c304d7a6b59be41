import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAs, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Issue 8 (adversarial pass), items 6 and 7 and part of 4 (start-up survives trash it cannot purge): each attack run as the home's
 * unprivileged owner through the mount.
 */

/** each home's owner (an owner belongs to one home) */
/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const U = { text: { uid: BASE + 83, gid: BASE + 83 }, files: { uid: BASE + 84, gid: BASE + 84 } };

if (!canMount) console.warn(`hardening integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount)('hardening: fallocate in text homes, user .fuse_hidden files', () => {
  let d: RunningDaemon;

  const ctl = (...args: string[]) => spawnSync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', ...args], { encoding: 'utf8', timeout: 20_000 });

  beforeAll(async () => {
    d = await startDaemon({
      awaitLedgers: true,
      create: ['h/text', 'h/files'],
      homes: { 'h/text': { owner: U.text, profile: 'scratch' }, 'h/files': { owner: U.files, profile: 'home' } },
    });
  });

  afterAll(async () => {
    await d?.stop();
  });

  it('item 6: posix_fallocate past a cut character is refused with EILSEQ; no invalid byte becomes readable', async () => {
    const h = d.home('h', 'text');
    const r = await runAs(
      U.text.uid,
      U.text.gid,
      `python3 -c '
import os, errno
fd = os.open("${h}/e.txt", os.O_CREAT | os.O_RDWR, 0o600)
os.write(fd, "\\u00e9".encode())
os.ftruncate(fd, 1)
for what, call in (("fallocate", lambda: os.posix_fallocate(fd, 0, 8)), ("fallocate-gap", lambda: os.posix_fallocate(fd, 4, 4))):
    try:
        call(); print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
print("size", os.fstat(fd).st_size)
'`,
    );
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('fallocate EILSEQ');
    expect(r.stdout).toContain('fallocate-gap EILSEQ');
    expect(r.stdout).toContain('size 1');
    // The backing file holds the one cut byte, never c3 00…
    expect([...readFileSync(join(d.backingOf('h', 'text'), 'e.txt'))]).toEqual([0xc3]);
    // and nobody reads it through the mount until it is whole.
    const rd = await runAs(U.text.uid, U.text.gid, `cat ${h}/e.txt >/dev/null 2>&1; echo "rc=$?"`);
    expect(rd.stdout.trim()).not.toBe('rc=0');
    // A whole file may still be zero-extended (NUL is valid UTF-8).
    const ok = await runAs(U.text.uid, U.text.gid, `python3 -c 'import os; fd = os.open("${h}/ok.txt", os.O_CREAT | os.O_RDWR, 0o600); os.write(fd, b"ab"); os.posix_fallocate(fd, 0, 8); print(os.fstat(fd).st_size)'`);
    expect(ok.stdout.trim()).toBe('8');
  });

  it('item 7: a user file named .fuse_hidden* survives rescan and restart, and stays charged', async () => {
    const h = d.home('h', 'files');
    const r = await runAs(U.files.uid, U.files.gid, `head -c 4321 /dev/urandom > ${h}/.fuse_hidden0000000100000001 && mkdir ${h}/sub && echo keep > ${h}/sub/.fuse_hidden42 && echo done`);
    expect(r.stdout.trim()).toBe('done');
    const rescan = ctl('rescan', 'h/files');
    expect(rescan.status).toBe(0);
    const b = d.backingOf('h', 'files');
    expect(statSync(join(b, '.fuse_hidden0000000100000001')).size).toBe(4321);
    expect(existsSync(join(b, 'sub', '.fuse_hidden42'))).toBe(true);
    d = await d.restart();
    await d.waitForLog((l) => l.msg === 'home ledger built' && l.home === 'h/files');
    expect(statSync(join(b, '.fuse_hidden0000000100000001')).size).toBe(4321);
    expect(readFileSync(join(b, 'sub', '.fuse_hidden42'), 'utf8')).toBe('keep\n');
    const usage = JSON.parse(ctl('usage', 'h/files').stdout) as { bytes: number };
    expect(usage.bytes).toBe(4321 + 5);
    const cat = await runAs(U.files.uid, U.files.gid, `cat ${h}/sub/.fuse_hidden42`);
    expect(cat.stdout).toBe('keep\n');
  });

  it('item 4: trash that cannot be removed is left with a warning; the daemon still starts, and purges it later', async () => {
    // A mount inside a half-deleted home makes its removal fail (EBUSY), as a tree too deep for
    // the descriptor limit did in the adversarial pass: start-up must not depend on it.
    const trash = join(d.backing, 'h', '.homesfs-trash-0123456789ab');
    const inner = join(trash, 'deep');
    mkdirSync(inner, { recursive: true, mode: 0o700 });
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'homesfs-test', inner]).status).toBe(0);
    try {
      d = await d.restart();
      const warn = await d.waitForLog((l) => l.msg.startsWith('could not remove a half-deleted home'));
      expect(warn.trash).toBe('.homesfs-trash-0123456789ab');
      expect(existsSync(trash)).toBe(true);
      const st = await d.status();
      expect((st.mount as { mounted: boolean }).mounted).toBe(true);
      const cat = await runAs(U.files.uid, U.files.gid, `cat ${d.home('h', 'files')}/sub/.fuse_hidden42`);
      expect(cat.stdout).toBe('keep\n');
    } finally {
      spawnSync('umount', [inner]);
    }
    d = await d.restart();
    await d.waitForLog((l) => l.msg === 'removed homes left half-deleted by an earlier run');
    expect(existsSync(trash)).toBe(false);
  });
});
