import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, runAs, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNER = { uid: BASE + 11, gid: BASE + 11 };

if (!canMount) console.warn(`backing-safety integration suite skipped: ${skipReason}`);

/** Everything about a directory tree that an escape could change. */
function fingerprint(dir: string): string {
  const out: string[] = [];
  const walk = (p: string): void => {
    const st = statSync(p, { bigint: true });
    out.push(`${p} ${st.mode} ${st.uid} ${st.size} ${st.mtimeNs} ${st.nlink}`);
    if (st.isDirectory()) for (const n of readdirSync(p).sort()) walk(join(p, n));
    else out.push(readFileSync(p, 'base64'));
  };
  walk(dir);
  return out.join('\n');
}

describe.skipIf(!canMount)('backing safety: nothing outside a home is ever touched', () => {
  let d: RunningDaemon;
  let home: string;
  let backing: string;
  const victim = mkdtempSync(join(tmpdir(), 'homesfs-victim-'));

  beforeAll(async () => {
    // A world-writable victim: if the daemon (root) ever followed a link into it,
    // nothing in the permissions would stop the damage; only the daemon's walk does.
    writeFileSync(join(victim, 'canary'), 'untouched\n');
    mkdirSync(join(victim, 'sub'));
    writeFileSync(join(victim, 'sub', 'f'), 'victim file\n');
    chmodSync(victim, 0o777);
    chmodSync(join(victim, 'sub'), 0o777);
    chmodSync(join(victim, 'canary'), 0o666);
    chmodSync(join(victim, 'sub', 'f'), 0o666);
    d = await startDaemon({
      create: ['acme/proj', 'acme/other'],
      homes: { 'acme/proj': { owner: OWNER }, 'acme/other': { owner: { uid: OWNER.uid + 1, gid: OWNER.gid + 1 } } },
    });
    home = d.home('acme', 'proj');
    backing = d.backingOf('acme', 'proj');
    mkdirSync(join(backing, 'sub'));
    writeFileSync(join(backing, 'sub', 'inside.txt'), 'inside\n');
    // Planted by "an admin" in the backing tree.
    symlinkSync(victim, join(backing, 'esc-dir'));
    symlinkSync(join(victim, 'canary'), join(backing, 'esc-file'));
    symlinkSync('../other', join(backing, 'esc-rel'));
    symlinkSync('sub/inside.txt', join(backing, 'ok-link'));
    mkdirSync(join(backing, 'sub', 'deep'));
    symlinkSync('../../../other', join(backing, 'sub', 'deep', 'esc-deep'));
    await d.waitForLog((l) => l.msg === 'home ledger built' && l.home === 'acme/proj');
  });

  afterAll(async () => {
    await d?.stop();
    rmSync(victim, { recursive: true, force: true });
  });

  it('presents planted symlinks as symlinks, answers EACCES for targets that leave the home', async () => {
    const before = fingerprint(victim);
    const r = await runAs(
      OWNER.uid,
      OWNER.gid,
      `cd ${home}; ls -l | cut -c1 | sort | uniq -c | tr -s ' '; readlink esc-dir; echo "r1=$?"; readlink esc-rel; echo "r2=$?"; readlink sub/deep/esc-deep; echo "r3=$?"; readlink ok-link; cat ok-link; cat esc-file; echo "c=$?"; ls esc-dir/; echo "l=$?"; echo pwned > esc-dir/new; echo "w=$?"; chmod 666 esc-file; touch -h esc-file; truncate -s0 esc-file; echo done`,
    );
    expect(r.stdout).toMatch(/r1=1/);
    expect(r.stdout).toMatch(/r2=1/);
    expect(r.stdout).toMatch(/r3=1/);
    expect(r.stdout).toContain('sub/inside.txt\ninside\n');
    expect(r.stdout).toMatch(/c=1/);
    expect(r.stderr).toMatch(/Permission denied/);
    expect(fingerprint(victim)).toBe(before);
    const refusals = d.logs.filter((l) => l.code === 'SYMLINK_ESCAPES');
    expect(refusals.length).toBeGreaterThan(0);
  });

  it('removes a planted symlink itself, never its target', async () => {
    const before = fingerprint(victim);
    const r = await runAs(OWNER.uid, OWNER.gid, `cd ${home} && rm esc-file && rm esc-dir && ls`);
    expect(r.stderr).toBe('');
    expect(r.stdout).not.toContain('esc-file');
    expect(fingerprint(victim)).toBe(before);
  });

  it('survives directories swapped for symlinks in a loop while a process works in the mount', async () => {
    const before = fingerprint(victim);
    mkdirSync(join(backing, 'd'), { recursive: true });
    writeFileSync(join(backing, 'd', 'f'), 'x');
    // The swapper runs as root in the backing tree, directly: the attacker's best case.
    const swapper = spawn(
      'python3',
      [
        '-c',
        `
import os, time, sys
b, victim = sys.argv[1], sys.argv[2]
end = time.time() + 4
n = 0
while time.time() < end:
    os.rename(b + '/d', b + '/d.real')
    os.symlink(victim, b + '/d.tmp'); os.rename(b + '/d.tmp', b + '/d')
    time.sleep(0.001)
    os.unlink(b + '/d'); os.rename(b + '/d.real', b + '/d')
    n += 1
print(n)
`,
        backing,
        victim,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let swaps = '';
    swapper.stdout.on('data', (x: Buffer) => (swaps += x.toString()));
    const swapped = new Promise<void>((res) => swapper.on('close', () => res()));
    const worker = runAs(
      OWNER.uid,
      OWNER.gid,
      `cd ${home}; end=$(( $(date +%s) + 4 )); i=0; while [ $(date +%s) -lt $end ]; do i=$((i+1));
        echo data$i > d/f$i; cat d/f$i; cat d/canary; ls d/; chmod 644 d/f$i d/canary; touch d/canary d/f$i; truncate -s 0 d/canary;
        mv d/f$i d/g$i; rm -f d/g$i d/canary; mkdir d/x$i; rmdir d/x$i; ln -s /etc d/l$i; ln d/canary d/h$i; cp sub/inside.txt d/; mv d/sub d/sub2; rm -rf d/sub2;
      done >/dev/null 2>&1; echo iterations=$i`,
      { timeoutMs: 60_000 },
    );
    const [w] = await Promise.all([worker, swapped]);
    expect(Number(swaps.trim())).toBeGreaterThan(10);
    expect(w.stdout).toMatch(/iterations=\d+/);
    expect(fingerprint(victim)).toBe(before);
    // The daemon is still serving.
    const r = await runAs(OWNER.uid, OWNER.gid, `cat ${home}/sub/inside.txt`);
    expect(r.stdout).toBe('inside\n');
  });

  it('refuses a home on another device than its tenant, and a mount point inside a home', async () => {
    const foreign = join(d.backing, 'acme', 'devhome');
    const inner = join(backing, 'mnt-inside');
    mkdirSync(foreign);
    mkdirSync(inner);
    const mounted: string[] = [];
    try {
      for (const at of [foreign, inner]) {
        execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', at]);
        mounted.push(at);
      }
      writeFileSync(join(foreign, 'secret'), 'other device');
      writeFileSync(join(inner, 'secret'), 'other device');
      const r = await runAs(0, 0, `cat ${d.mount}/acme/devhome/secret 2>&1; touch ${d.mount}/acme/devhome/new 2>&1; cat ${home}/mnt-inside/secret 2>&1; touch ${home}/mnt-inside/new 2>&1; true`);
      expect(r.stdout).not.toContain('other device');
      expect(existsSync(join(foreign, 'new'))).toBe(false);
      expect(existsSync(join(inner, 'new'))).toBe(false);
      expect(d.logs.some((l) => l.code === 'CROSS_DEVICE')).toBe(true);
      // Nor its attributes: a name in a home's own directory is stat'ed in one call, which crosses the mount (fastpath_attr.c).
      const st = await runAs(0, 0, `stat -c '%i' ${home}/mnt-inside 2>&1; true`);
      expect(st.stdout.trim()).not.toBe(String(statSync(inner).ino));
    } finally {
      // Every mount made here goes, whatever failed: a busy one lazily, so none outlives the test.
      for (const at of mounted.reverse()) {
        try {
          execFileSync('umount', [at]);
        } catch {
          execFileSync('umount', ['-l', at]);
        }
      }
    }
  });

  it('skips backing names that are not valid (non-UTF-8, reserved, dot names) with a warning, never serving them', async () => {
    mkdirSync(join(d.backing, '.hidden-tenant'));
    mkdirSync(join(d.backing, 'acme', '_bogus'));
    mkdirSync(Buffer.concat([Buffer.from(d.backing + '/acme/'), Buffer.from([0x62, 0xff])]));
    writeFileSync(Buffer.concat([Buffer.from(backing + '/'), Buffer.from([0x66, 0xfe])]), 'latin1 name');
    const r = await runAs(0, 0, `ls -a ${d.mount}; ls -a ${d.mount}/acme; ls ${home}`);
    expect(r.stdout).not.toMatch(/hidden-tenant|_bogus/);
    expect(r.stdout.split('\n')).not.toContain('b\ufffd');
    expect(r.stdout).not.toContain('\ufffd');
    const miss = await runAs(0, 0, `stat ${d.mount}/.hidden-tenant 2>&1; stat ${d.mount}/acme/_bogus 2>&1; true`);
    expect(miss.stdout.match(/No such file/g)?.length).toBe(2);
    await d.waitForLog((l) => l.msg === 'backing name skipped, never served' && l.kind === 'home');
  });

  it('refuses a home whose backing directory is a symlink to elsewhere', async () => {
    symlinkSync(victim, join(d.backing, 'acme', 'linked'));
    const r = await runAs(0, 0, `ls ${d.mount}/acme; ls ${d.mount}/acme/linked 2>&1; cat ${d.mount}/acme/linked/canary 2>&1; true`);
    expect(r.stdout).not.toContain('untouched');
    expect(r.stdout.split('\n')[0]).not.toContain('linked');
  });
});
