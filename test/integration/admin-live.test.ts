import { request } from 'node:http';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { regularBytes } from '../helpers/backing.js';

/**
 * Issue 12, the live half: a tenant's total budget enforced at write time
 * across its homes, `df` honest over a lowered budget, and the Prometheus
 * endpoint scraped over its real socket and port after real workloads.
 */

const KiB = 1024;
const MiB = 1024 * KiB;
const TENANT_BUDGET = 3 * MiB;
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
/** the owners of acme's homes, one each (an owner belongs to one home) */
const U = { a: { uid: BASE + 17, gid: BASE + 17 }, b: { uid: BASE + 21, gid: BASE + 21 }, c: { uid: BASE + 22, gid: BASE + 22 } };
const T = 'acme';

if (!canMount) console.warn(`admin-live integration suite skipped: ${skipReason}`);

const roomy = { ...BUILTIN_PROFILES.home, maxHomeBytes: 64 * MiB, maxFileBytes: 0 };
const HOMES = {
  [`${T}/a`]: { owner: U.a, profile: 'roomy' },
  [`${T}/b`]: { owner: U.b, profile: 'roomy' },
  [`${T}/c`]: { owner: U.c, profile: 'roomy' },
  ['other/x']: { owner: { uid: BASE + 19, gid: BASE + 19 }, profile: 'roomy' },
  ['st/s']: { owner: { uid: BASE + 20, gid: BASE + 20 }, profile: 'roomy' },
};
const U2 = { uid: BASE + 18, gid: BASE + 18 };


/** GET over a Unix socket or a TCP port: the real endpoint, no client library. */
function scrape(target: { socketPath: string } | { host: string; port: number }, path = '/metrics'): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ ...target, path, method: 'GET' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The value of one sample line `name{labels} value` (labels in the order the daemon writes them). */
function sample(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe.skipIf(!canMount)('admin live: tenant budget, honest df, metrics', () => {
  let d: RunningDaemon;
  let metricsDir: string;
  let metricsSocket: string;
  let port: number;

  const ctl = async (...args: string[]) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
    return r;
  };
  const ctlJson = async <T = Record<string, unknown>>(...args: string[]): Promise<T> => {
    const r = await ctl('--json', ...args);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
    return JSON.parse(r.stdout) as T;
  };
  /** a shell script run as the owner of acme's home `k` */
  const sh = (k: keyof typeof U, script: string) => runAs(U[k].uid, U[k].gid, script, { timeoutMs: 60_000 });
  const tenantOnDisk = () => ['a', 'b', 'c'].reduce((n, k) => n + regularBytes(d.backingOf(T, k)), 0);

  beforeAll(async () => {
    metricsDir = mkdtempSync(join(tmpdir(), 'homesfs-metrics-'));
    metricsSocket = join(metricsDir, 'metrics.sock');
    d = await startDaemon({
      awaitLedgers: true,
      create: Object.keys(HOMES),
      homes: HOMES,
      config: {
        owners: OWNERS,
        profiles: { roomy },
        tenants: { [T]: { maxBytes: TENANT_BUDGET } },
        metrics: { socket: metricsSocket, listen: '127.0.0.1:0' },
      },
    });
    const line = await d.waitForLog((l) => l.msg === 'metrics endpoint listening');
    const tcp = (line.addresses as string[]).find((a) => a.startsWith('127.0.0.1:'))!;
    port = Number(tcp.split(':')[1]);
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
    rmSync(metricsDir, { recursive: true, force: true });
  });

  it('racing writers in two homes of one tenant never pass the tenant budget by one byte', async () => {
    // Four writers, two per home, 100000-byte requests (not a divisor of the budget), 2.4 MB each: 9.6 MB asked of 3 MiB.
    const writers = (['a', 'a', 'b', 'b'] as const).map((k, i) =>
      sh(k, `cd ${d.home(T, k)} && dd if=/dev/zero of=w${i} bs=100000 count=24 2>&1; echo "rc=$?"`),
    );
    const results = await Promise.all(writers);
    const refused = results.filter((r) => r.stdout.includes('Disk quota exceeded'));
    expect(refused.length).toBeGreaterThan(0);
    const onDisk = tenantOnDisk();
    expect(onDisk).toBeLessThanOrEqual(TENANT_BUDGET);
    // Full up to less than one request: the refusals were the budget, not something else.
    expect(TENANT_BUDGET - onDisk).toBeLessThan(100000);
    const t = await ctlJson<{ bytes: number; budget: number; budgetSource: string; homes: Array<{ key: string; bytes: number }> }>('tenant-usage', T);
    expect(t.bytes).toBe(onDisk);
    expect(t.budget).toBe(TENANT_BUDGET);
    expect(t.budgetSource).toBe('config');
    expect(t.homes.find((h) => h.key === 'a')!.bytes).toBe(regularBytes(d.backingOf(T, 'a')));
    // The refusal is logged with its own code and the way out.
    const line = await d.waitForLog((l) => l.level === 'warn' && l.code === 'TENANT_QUOTA_EXCEEDED' && l.op === 'write', 10_000);
    expect(line.errno).toBe('EDQUOT');
    expect(String(line.waysOut)).toContain('set-tenant-budget');
    // A third home of the tenant cannot grow either; another tenant is not affected.
    const r = await sh('c', `cd ${d.home(T, 'c')} && head -c 200000 /dev/zero > f; echo "rc=$?"`);
    expect(r.stderr).toContain('Disk quota exceeded');
    expect(r.stdout).toBe('rc=1\n');
    const ox = HOMES['other/x']!.owner;
    const o = await runAs(ox.uid, ox.gid, `cd ${d.home('other', 'x')} && head -c 200000 /dev/zero > f; echo "rc=$?"`);
    expect(o.stdout).toBe('rc=0\n');
    expect(tenantOnDisk()).toBeLessThanOrEqual(TENANT_BUDGET);
    // usage of one home carries its tenant's total and budget.
    const u = await ctlJson<{ tenantBytes: number; tenantBudget: number }>('usage', `${T}/c`);
    expect(u).toMatchObject({ tenantBytes: tenantOnDisk(), tenantBudget: TENANT_BUDGET });
  }, 90_000);

  it('truncate and fallocate are charged to the tenant; unlink and truncate-down release', async () => {
    const before = (await ctlJson<{ bytes: number }>('tenant-usage', T)).bytes;
    const room = TENANT_BUDGET - before;
    let r = await sh('c', `cd ${d.home(T, 'c')} && truncate -s ${room + 1} t 2>&1; echo "rc=$?"; fallocate -l ${room + 1} fa 2>&1; echo "rc=$?"`);
    expect(r.stdout).toMatch(/Disk quota exceeded\nrc=1\n[\s\S]*Disk quota exceeded\nrc=1\n/);
    expect((await ctlJson<{ bytes: number }>('tenant-usage', T)).bytes).toBe(tenantOnDisk());
    // Exactly the room fits.
    r = await sh('c', `cd ${d.home(T, 'c')} && truncate -s ${room} t; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    expect((await ctlJson<{ bytes: number }>('tenant-usage', T)).bytes).toBe(TENANT_BUDGET);
    expect(tenantOnDisk()).toBe(TENANT_BUDGET);
    // Deletes release: removing home a's files frees room for home b.
    const aBytes = regularBytes(d.backingOf(T, 'a'));
    r = await sh('a', `cd ${d.home(T, 'a')} && rm -f w0 w1; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    r = await sh('c', `truncate -s 0 ${d.home(T, 'c')}/t; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    const after = await ctlJson<{ bytes: number }>('tenant-usage', T);
    expect(after.bytes).toBe(TENANT_BUDGET - aBytes - room);
    expect(after.bytes).toBe(tenantOnDisk());
    r = await sh('b', `cd ${d.home(T, 'b')} && head -c ${aBytes} /dev/zero > more; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
  }, 60_000);

  it('set-tenant-budget SIZE|off|default: live, persisted in the state file, reported by homesctl', async () => {
    let r = await ctl('set-tenant-budget', T, 'off');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Budget:\s+off/);
    r = await sh('c', `cd ${d.home(T, 'c')} && head -c ${2 * MiB} /dev/zero > big; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    const state = JSON.parse(readFileSync(join(d.dir, 'state.json'), 'utf8')) as { tenants?: Record<string, { maxBytes?: number }> };
    expect(state.tenants?.[T]?.maxBytes).toBe(0);
    // Lower it below usage: nothing is deleted, growth is refused, shrinking works.
    const t = await ctlJson<{ bytes: number; budget: number; budgetSource: string }>('set-tenant-budget', T, '1M');
    expect(t).toMatchObject({ budget: MiB, budgetSource: 'override' });
    expect(t.bytes).toBeGreaterThan(MiB);
    r = await sh('a', `cd ${d.home(T, 'a')} && env printf x 2>&1 >one; echo "rc=$?"`);
    expect(r.stdout).toMatch(/Disk quota exceeded[\s\S]*rc=1\n$/);
    r = await sh('c', `rm ${d.home(T, 'c')}/big; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    r = await ctl('tenant-usage', T);
    expect(r.stdout).toMatch(/over budget/);
    // default: back to the config's 3 MiB, and the override leaves the state file.
    const back = await ctlJson<{ budget: number; budgetSource: string }>('set-tenant-budget', T, 'default');
    expect(back).toMatchObject({ budget: TENANT_BUDGET, budgetSource: 'config' });
    const state2 = JSON.parse(readFileSync(join(d.dir, 'state.json'), 'utf8')) as { tenants?: Record<string, unknown> };
    expect(state2.tenants?.[T]).toBeUndefined();
    // Bad input: a clear error, nothing changed.
    r = await ctl('set-tenant-budget', T, '-5');
    expect(r.code).not.toBe(0);
    expect((await ctlJson<{ budget: number }>('tenant-usage', T)).budget).toBe(TENANT_BUDGET);
    r = await ctl('tenant-usage', 'nosuchtenant');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('NOT_FOUND');
  }, 60_000);

  it('a new home joins its tenant total, a deleted one leaves it; SIGHUP applies a new tenants.<t>.maxBytes', async () => {
    await ctlJson('set-tenant-budget', T, 'off');
    const created = await ctlJson<{ owner: { uid: number; gid: number } }>('create', `${T}/d`);
    expect(created.owner.uid).toBeGreaterThanOrEqual(BASE);
    const before = (await ctlJson<{ bytes: number }>('tenant-usage', T)).bytes;
    let r = await runAs(created.owner.uid, created.owner.gid, `cd ${d.home(T, 'd')} && head -c 300000 /dev/zero > f; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    expect((await ctlJson<{ bytes: number }>('tenant-usage', T)).bytes).toBe(before + 300000);
    r = await ctl('delete-project', '--tenant', T, 'd');
    expect(r.code, r.stderr).toBe(0);
    const after = await ctlJson<{ bytes: number; homes: Array<{ key: string }> }>('tenant-usage', T);
    expect(after.bytes).toBe(before);
    expect(after.homes.map((h) => h.key)).not.toContain('d');
    await ctlJson('set-tenant-budget', T, 'default');
    // Reload: the config's value applies at once (no override is set now).
    const configPath = join(d.dir, 'config.json');
    const config = JSON.parse(readFileSync(configPath, 'utf8')) as { tenants: Record<string, { maxBytes: number }> };
    config.tenants[T]!.maxBytes = 5 * MiB;
    writeFileSync(configPath, JSON.stringify(config));
    d.proc.kill('SIGHUP');
    await d.waitForLog((l) => l.msg === 'configuration reloaded' && d.logs.indexOf(l) >= 0);
    expect(await ctlJson('tenant-usage', T)).toMatchObject({ budget: 5 * MiB, budgetSource: 'config' });
    config.tenants[T]!.maxBytes = TENANT_BUDGET;
    writeFileSync(configPath, JSON.stringify(config));
    const seen = d.logs.filter((l) => l.msg === 'configuration reloaded').length;
    d.proc.kill('SIGHUP');
    await d.waitForLog((l) => l.msg === 'configuration reloaded' && d.logs.filter((x) => x.msg === 'configuration reloaded').length > seen);
    expect(await ctlJson('tenant-usage', T)).toMatchObject({ budget: TENANT_BUDGET, budgetSource: 'config' });
  }, 60_000);

  it('df -B1 in a home over its lowered budget shows the real usage, nothing available', async () => {
    await ctlJson('set-tenant-budget', T, 'off');
    const h = d.home(T, 'b');
    let r = await sh('b', `cd ${h} && head -c ${3 * MiB} /dev/zero > df3; echo "rc=$?"`);
    expect(r.stdout).toBe('rc=0\n');
    const used = (await ctlJson<{ bytes: number }>('usage', `${T}/b`)).bytes;
    expect(used).toBeGreaterThan(2 * MiB);
    await ctlJson('set-budget', `${T}/b`, String(MiB));
    r = await sh('b', `cd ${h} && df -B1 --output=size,used,avail,pcent . | tail -n 1`);
    const [size, dfUsed, avail, pcent] = r.stdout.trim().split(/\s+/);
    expect(Number(avail)).toBe(0);
    expect(pcent).toBe('100%');
    // used = size − free: the real usage (to the 4 KiB block), not the budget.
    expect(Math.abs(Number(dfUsed) - used)).toBeLessThan(4096);
    expect(Math.abs(Number(size) - used)).toBeLessThan(4096);
    // Under its budget again: size is the budget.
    await ctlJson('set-budget', `${T}/b`, String(64 * MiB));
    r = await sh('b', `cd ${h} && df -B1 --output=size,used . | tail -n 1`);
    const [size2, used2] = r.stdout.trim().split(/\s+/).map(Number);
    expect(size2).toBe(64 * MiB);
    expect(Math.abs(used2! - used)).toBeLessThan(4096);
    // A tenant budget tighter than the home's shows as the size the home can reach.
    await ctlJson('set-tenant-budget', T, String(TENANT_BUDGET * 2));
    const tenantBytes = (await ctlJson<{ bytes: number }>('tenant-usage', T)).bytes;
    r = await sh('b', `cd ${h} && df -B1 --output=avail . | tail -n 1`);
    expect(Math.abs(Number(r.stdout.trim()) - (TENANT_BUDGET * 2 - tenantBytes))).toBeLessThan(4096);
    // The metrics test below wants the home budget of c to be what refuses.
    await ctlJson('set-tenant-budget', T, 'off');
  }, 60_000);

  it('metrics: scraped over the real socket and port, numbers match homesctl usage', async () => {
    // Some work to count, including one refusal of a home budget.
    await ctlJson('set-budget', `${T}/c`, String(64 * KiB));
    // Read back through a read-write descriptor: a read-only one is passed through (the kernel reads the file itself).
    await sh('c', `cd ${d.home(T, 'c')} && rm -f * && head -c 100000 /dev/zero > over 2>/dev/null; ls -l >/dev/null; exec 3<>over && cat <&3 >/dev/null`);
    const viaSocket = await scrape({ socketPath: metricsSocket });
    expect(viaSocket.status).toBe(200);
    expect(viaSocket.type).toContain('text/plain; version=0.0.4');
    const viaPort = await scrape({ host: '127.0.0.1', port });
    expect(viaPort.status).toBe(200);
    const body = viaSocket.body;
    for (const home of [`${T}/a`, `${T}/b`, `${T}/c`, 'other/x']) {
      const u = await ctlJson<{ bytes: number; inodes: number; budget: number; inodeCap: number }>('usage', home);
      const l = `{home="${home}",tenant="${home.split('/')[0]}"}`;
      expect(sample(body, `homesfs_home_bytes${l}`)).toBe(u.bytes);
      expect(sample(body, `homesfs_home_inodes${l}`)).toBe(u.inodes);
      expect(sample(body, `homesfs_home_budget_bytes${l}`)).toBe(u.budget);
      expect(sample(body, `homesfs_home_inode_cap${l}`)).toBe(u.inodeCap);
    }
    const t = await ctlJson<{ bytes: number; budget: number }>('tenant-usage', T);
    expect(sample(body, `homesfs_tenant_bytes{tenant="${T}"}`)).toBe(t.bytes);
    expect(sample(body, `homesfs_tenant_budget_bytes{tenant="${T}"}`)).toBe(t.budget);
    expect(sample(body, `homesfs_refusals_total{home="${T}/c",code="QUOTA_EXCEEDED"}`)).toBeGreaterThanOrEqual(1);
    expect(sample(body, `homesfs_refusals_total{home="${T}/a",code="TENANT_QUOTA_EXCEEDED"}`)).toBeGreaterThanOrEqual(1);
    // Per-op counts and histograms: the +Inf bucket and _count equal the request count.
    // READs of these (binary) homes through that descriptor are answered in the binding (fuse.nativeRead), counted apart.
    expect(sample(body, 'homesfs_native_reads_total')).toBeGreaterThan(0);
    expect(sample(body, 'homesfs_native_read_bytes_total')).toBeGreaterThan(0);
    for (const op of ['write', 'create', 'getattr']) {
      const n = sample(body, `homesfs_fuse_requests_total{op="${op}"}`);
      expect(n).toBeGreaterThan(0);
      expect(sample(body, `homesfs_fuse_request_duration_seconds_bucket{op="${op}",le="+Inf"}`)).toBe(n);
      expect(sample(body, `homesfs_fuse_request_duration_seconds_count{op="${op}"}`)).toBe(n);
    }
    expect(sample(body, 'homesfs_fuse_errors_total{op="write"}')).toBeGreaterThan(0);
    // Counters only grow between scrapes, and the endpoint answers nothing else.
    const again = await scrape({ host: '127.0.0.1', port });
    expect(sample(again.body, 'homesfs_fuse_requests_total{op="write"}')).toBeGreaterThanOrEqual(sample(body, 'homesfs_fuse_requests_total{op="write"}')!);
    expect((await scrape({ socketPath: metricsSocket }, '/nope')).status).toBe(404);
    expect(statSync(metricsSocket).mode & 0o777).toBe(0o600);
  }, 60_000);

  describe('.homesfs/status: why a write was refused, without admin rights', () => {
    // st/s has an owner of its own tenant's
    const U = HOMES['st/s']!.owner;
    const sh = (script: string) => runAs(U.uid, U.gid, script, { timeoutMs: 60_000 });
    const h = () => d.home('st', 's');
    const b = () => d.backingOf('st', 's');

    it('is there from the start, owner-only, read-only, with a synthetic inode number, and not listed while .homesfs does not exist', async () => {
      const r = await sh(`cd ${h()} && ls -a; echo --; ls -a .homesfs; echo --; stat -c '%A %u %i' .homesfs/status; cat .homesfs/status`);
      expect(r.stderr).toBe('');
      const [root, dir, rest] = r.stdout.split('--\n');
      expect(root).toBe('.\n..\n');
      expect(dir).toBe('.\n..\nstatus\n');
      const [mode, uid, ino] = rest!.split('\n')[0]!.split(' ');
      expect(mode).toBe('-r--------');
      expect(Number(uid)).toBe(U.uid);
      expect(BigInt(ino!) >= 1n << 63n).toBe(true);
      expect(rest).toContain('homesfs status of st/s');
      expect(rest).toContain('no refusals recorded');
      // Not stored: the backing tree has no .homesfs.
      expect(readdirSync(b())).toEqual([]);
      // Another uid cannot read it.
      const other = await runAs(U2.uid, U2.gid, `cat ${h()}/.homesfs/status 2>&1; echo "rc=$?"`);
      expect(other.stdout).toMatch(/Permission denied\nrc=1\n$/);
    }, 30_000);

    it('shows a budget refusal in plain words after dd hits the budget', async () => {
      await ctlJson('set-budget', 'st/s', '1M');
      const r = await sh(`cd ${h()} && dd if=/dev/zero of=big bs=64k count=20 2>&1; echo "rc=$?"; cat .homesfs/status`);
      expect(r.stdout).toContain('Disk quota exceeded');
      expect(r.stdout).toMatch(/bytes: +1\.0 MiB \(1048576 bytes\) of 1\.0 MiB \(1048576 bytes\), 100\.0% — FULL/);
      expect(r.stdout).toMatch(/write big: QUOTA_EXCEEDED \(EDQUOT\) — the home's byte budget is used up: home would grow to \d+ bytes, over its budget of 1048576/);
      expect(r.stdout).toContain('tenant total:');
      expect(r.stdout).toContain('Ways out:');
    }, 30_000);

    it('keeps the last 20 refusals, newest first; one open reads one consistent text', async () => {
      await sh(`cd ${h()} && for i in $(seq 1 25); do env printf x >> big$i 2>/dev/null; done; true`);
      let r = await sh(`cat ${h()}/.homesfs/status`);
      const lines = r.stdout.split('\n').filter((l) => l.includes('QUOTA_EXCEEDED (EDQUOT)'));
      expect(lines).toHaveLength(20);
      expect(lines[0]).toContain('write big25:');
      expect(r.stdout).toContain('last 20 refusals, newest first');
      // Read in small pieces around a new refusal: the open's text does not change.
      const py = `
import os, sys
fd = os.open(sys.argv[1] + '/.homesfs/status', os.O_RDONLY)
first = os.read(fd, 16)
try:
    with open(sys.argv[1] + '/big', 'ab') as f:
        f.write(b'y')
except OSError:
    pass
rest = b''
while True:
    c = os.read(fd, 7)
    if not c:
        break
    rest += c
os.close(fd)
text = (first + rest).decode()
again = open(sys.argv[1] + '/.homesfs/status').read()
print(text.count('big25'), again.count('write big:') - text.count('write big:'))
`;
      const pr = await runAs(U.uid, U.gid, `python3 -c "$PY" ${h()}`, { env: { PY: py } });
      expect(pr.stderr).toBe('');
      // The first read saw big25 as the newest; the write in between is only in a new open.
      expect(pr.stdout).toBe('1 1\n');
    }, 30_000);

    it('cannot be written, truncated, removed, renamed over, chmod-ed or touched (EACCES / EPERM), even by root', async () => {
      const r = await sh(
        `cd ${h()}/.homesfs && { echo x > status; } 2>&1; echo "rc=$?"; rm -f status 2>&1; echo "rc=$?"; chmod 600 status 2>&1; echo "rc=$?"; ` +
          `touch status 2>&1; echo "rc=$?"; truncate -s 0 status 2>&1; echo "rc=$?"; cd .. && rm -f big && mv big1 .homesfs/status 2>&1; echo "rc=$?"`,
      );
      // The kernel answers EACCES for opens for writing (mode 0400); what reaches the daemon is refused with EPERM.
      const lines = r.stdout.split('\n');
      expect(lines.filter((l) => l.startsWith('rc=')).every((l) => l !== 'rc=0'), r.stdout).toBe(true);
      expect(r.stdout).toMatch(/cannot create status: Permission denied/);
      expect(r.stdout).toMatch(/rm: cannot remove 'status': Operation not permitted/);
      expect(r.stdout).toMatch(/chmod: changing permissions of 'status': Operation not permitted/);
      expect(r.stdout).toMatch(/touch: cannot touch 'status': Permission denied/);
      expect(r.stdout).toMatch(/truncate: cannot open 'status' for writing: Permission denied/);
      expect(r.stdout).toMatch(/mv: cannot move 'big1' to '.homesfs\/status': Operation not permitted/);
      const root = await runAsync('python3', [
        '-c',
        `
import os, errno, sys
p = sys.argv[1] + '/.homesfs/status'
out = []
for name, fn in [('open-w', lambda: os.open(p, os.O_WRONLY)), ('truncate', lambda: os.truncate(p, 0)), ('unlink', lambda: os.unlink(p)), ('chmod', lambda: os.chmod(p, 0o644))]:
    try:
        fn(); out.append(name + ' ok')
    except OSError as e:
        out.append(name + ' ' + errno.errorcode[e.errno])
print(' '.join(out))
`,
        h(),
      ]);
      expect(root.stdout.trim()).toBe('open-w EACCES truncate EPERM unlink EPERM chmod EPERM');
      expect((await sh(`cat ${h()}/.homesfs/status | head -1`)).stdout).toContain('homesfs status of st/s');
      // The refusals of the status file are recorded too (OP_REFUSED), in plain words.
      expect((await sh(`cat ${h()}/.homesfs/status`)).stdout).toMatch(/unlink \.homesfs\/status: OP_REFUSED \(EPERM\)/);
    }, 30_000);

    it('.homesfs stays a real directory users write into; status is never counted in a budget', async () => {
      await ctlJson('set-budget', 'st/s', 'off');
      const r = await sh(`cd ${h()} && echo 'export A=1' > .homesfs/env.sh && mkdir .homesfs/d && ls -a; echo --; ls .homesfs; . .homesfs/env.sh; echo "A=$A"`);
      expect(r.stderr).toBe('');
      expect(r.stdout).toMatch(/^\.\n\.\.\n\.homesfs\n/);
      expect(r.stdout).toContain('--\nd\nenv.sh\nstatus\nA=1\n');
      expect(readdirSync(join(b(), '.homesfs')).sort()).toEqual(['d', 'env.sh']);
      expect(statSync(join(b(), '.homesfs')).isDirectory()).toBe(true);
      const u = await ctlJson<{ bytes: number; inodes: number }>('usage', 'st/s');
      expect(u.bytes).toBe(regularBytes(b()));
      const count = (dir: string): number => readdirSync(dir, { withFileTypes: true }).reduce((n, e) => n + 1 + (e.isDirectory() ? count(join(dir, e.name)) : 0), 0);
      expect(u.inodes).toBe(count(b()));
      // A file may not take the name .homesfs at the home root (status must stay reachable).
      // Without a backing directory it is still there (lookups find the daemon's empty one), so nothing replaces it.
      const f = await sh(`cd ${h()} && rm -r .homesfs/d .homesfs/env.sh && rmdir .homesfs && echo x > tmpf && mv -T tmpf .homesfs 2>&1; echo "rc=$?"; ln -sT tmpf .homesfs 2>&1; echo "rc=$?"; stat -c %F .homesfs; head -1 .homesfs/status`);
      expect(f.stdout).toMatch(/rc=1\n[\s\S]*rc=1\ndirectory\nhomesfs status of st\/s/);
      expect(existsSync(join(b(), '.homesfs'))).toBe(false);
      // mv into it makes the backing directory on demand.
      const m = await sh(`cd ${h()} && mv tmpf .homesfs/ && ls .homesfs`);
      expect(m.stdout).toBe('status\ntmpf\n');
      expect(readdirSync(join(b(), '.homesfs'))).toEqual(['tmpf']);
    }, 30_000);
  });
});
