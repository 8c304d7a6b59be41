import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { HOMESCTL, canMount, runAs, runAsync, skipReason, startDaemon, type RunResult, type RunningDaemon } from '../helpers/daemon.js';
import { ownerAt, ownersFrom } from '../helpers/owner-suite.js';
import { regularBytes } from '../helpers/backing.js';
import { metricSample, scrapeMetrics } from '../helpers/metrics.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Quota semantics through the real mount: every fallocate mode (util-linux
 * fallocate(1) as the home's owner) with the ledger checked after each, and
 * soft limits crossing in the status file, `homesctl list`, the metrics and
 * the log.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
/** each home's owner: OWNERS.from + 61 and up, one per home */
const U = ownersFrom(OWNERS.from + 61, ['falloc', 'ftext', 'soft', 'soft2']);
const KiB = 1024;
const MiB = 1024 * KiB;
const T = 'q';

if (!canMount) console.warn(`quota integration suite skipped: ${skipReason}`);

const PROFILES = {
  /** 1 MiB per home, binary */
  fbudget: { extends: 'home', maxHomeBytes: MiB, maxFileBytes: 0 },
  /** text only, 1 MiB */
  ftext: { ...BUILTIN_PROFILES.scratch, maxHomeBytes: MiB, maxFileBytes: 0 },
  /** 1 MiB, warned above 600 KiB and above 5 inodes */
  softp: { extends: 'home', maxHomeBytes: MiB, maxFileBytes: 0, softHomeBytes: 600 * KiB, softInodes: 5 },
};

const HOMES: Record<string, { owner: { uid: number; gid: number }; profile: string }> = {
  [`${T}/falloc`]: { owner: U.falloc, profile: 'fbudget' },
  [`${T}/ftext`]: { owner: U.ftext, profile: 'ftext' },
  [`${T}/soft`]: { owner: U.soft, profile: 'softp' },
  [`${T}/soft2`]: { owner: U.soft2, profile: 'fbudget' },
};

interface Usage {
  bytes: number;
  inodes: number;
  flags: string[];
  soft: { bytes: number; inodes: number; overBytes: boolean; overInodes: boolean; sources: { bytes: string; inodes: string } };
}

describe.skipIf(!canMount)('quota semantics: fallocate modes and soft limits through the mount', () => {
  let d: RunningDaemon;
  let metricsDir: string;
  let metricsSocket: string;

  /** a shell script run as the owner of the home `h` is (or lies in) */
  const sh = (h: string, script: string): Promise<RunResult> => {
    const o = ownerAt(d, HOMES, h);
    return runAs(o.uid, o.gid, script, { timeoutMs: 60_000 });
  };
  const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
  const usage = async (k: string): Promise<Usage> => {
    const r = await ctl('--json', 'usage', `${T}/${k}`);
    if (r.code !== 0) throw new Error(`homesctl usage failed: ${r.stderr}`);
    return JSON.parse(r.stdout) as Usage;
  };
  const listed = async (k: string): Promise<Usage> => {
    const r = await ctl('--json', 'list', '--tenant', T);
    if (r.code !== 0) throw new Error(`homesctl list failed: ${r.stderr}`);
    return (JSON.parse(r.stdout) as Array<Usage & { key: string }>).find((h) => h.key === k)!;
  };
  const bytes = async (k: string): Promise<number> => (await usage(k)).bytes;
  const crossings = (k: string, msg: string) => d.logs.filter((l) => l.msg === msg && l.home === `${T}/${k}`);

  beforeAll(async () => {
    metricsDir = mkdtempSync(join(tmpdir(), 'homesfs-quota-metrics-'));
    metricsSocket = join(metricsDir, 'metrics.sock');
    d = await startDaemon({
      awaitLedgers: true,
      create: Object.keys(HOMES),
      homes: HOMES,
      config: { owners: OWNERS, profiles: PROFILES, metrics: { socket: metricsSocket } },
    });
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
    rmSync(metricsDir, { recursive: true, force: true });
  });

  it('charges the apparent size: a sparse truncate costs its size, mode 0 charges growth only', async () => {
    const h = d.home(T, 'falloc');
    let r = await sh(h, `truncate -s 300K ${h}/sparse && du -k ${h}/sparse | cut -f1`);
    expect(r.code).toBe(0);
    // The disk holds next to nothing; the budget counts what the size says.
    expect(Number(r.stdout.trim())).toBeLessThan(300);
    expect(await bytes('falloc')).toBe(300 * KiB);
    r = await sh(h, `fallocate -l 100000 ${h}/f && stat -c %s ${h}/f`);
    expect(r.stdout.trim()).toBe('100000');
    expect(await bytes('falloc')).toBe(300 * KiB + 100000);
    // the backing file's blocks are reserved, as fallocate promises (a later write cannot meet ENOSPC)
    expect(statSync(join(d.backingOf(T, 'falloc'), 'f')).blocks * 512).toBeGreaterThanOrEqual(100000);
    // inside the file: nothing changes, nothing is charged
    r = await sh(h, `fallocate -o 4096 -l 50000 ${h}/f && stat -c %s ${h}/f`);
    expect(r.stdout.trim()).toBe('100000');
    expect(await bytes('falloc')).toBe(300 * KiB + 100000);
    expect(await bytes('falloc')).toBe(regularBytes(d.backingOf(T, 'falloc')));
  });

  it('KEEP_SIZE: a no-op inside the file, refused (EOPNOTSUPP) past its end; the ledger never moves', async () => {
    const h = d.home(T, 'falloc');
    const before = await bytes('falloc');
    const blocks = statSync(join(d.backingOf(T, 'falloc'), 'f')).blocks;
    let r = await sh(h, `fallocate -n -o 0 -l 100000 ${h}/f; echo "rc=$?"`);
    expect(r.stdout.trim()).toBe('rc=0');
    r = await sh(h, `fallocate -n -o 99999 -l 10 ${h}/f; echo "rc=$?"; stat -c %s ${h}/f`);
    expect(r.stdout.trim()).toBe('rc=1\n100000');
    expect(r.stderr).toMatch(/unsupported|not supported/i);
    expect(await bytes('falloc')).toBe(before);
    expect(statSync(join(d.backingOf(T, 'falloc'), 'f')).size).toBe(100000);
    expect(statSync(join(d.backingOf(T, 'falloc'), 'f')).blocks).toBe(blocks);
  });

  it('ZERO_RANGE zeroes inside (no charge) and charges the growth past the end; with KEEP_SIZE it stays inside', async () => {
    const h = d.home(T, 'falloc');
    const back = join(d.backingOf(T, 'falloc'), 'z');
    let r = await sh(h, `head -c 8192 /dev/zero | tr '\\0' x > ${h}/z`);
    expect(r.code).toBe(0);
    const before = await bytes('falloc');
    r = await sh(h, `fallocate -z -o 1000 -l 2000 ${h}/z && stat -c %s ${h}/z`);
    expect(r.stdout.trim()).toBe('8192');
    let data = readFileSync(back);
    expect(data.subarray(999, 3001)).toEqual(Buffer.concat([Buffer.from('x'), Buffer.alloc(2000), Buffer.from('x')]));
    expect(await bytes('falloc')).toBe(before);
    r = await sh(h, `fallocate -z -o 8000 -l 4192 ${h}/z && stat -c %s ${h}/z`);
    expect(r.stdout.trim()).toBe('12192');
    data = readFileSync(back);
    expect(data.subarray(7999, 8001)).toEqual(Buffer.from([0x78, 0]));
    expect(data.subarray(8000).every((b) => b === 0)).toBe(true);
    expect(await bytes('falloc')).toBe(before + 4000);
    r = await sh(h, `fallocate -z -n -o 0 -l 100 ${h}/z; echo "rc=$?"; fallocate -z -n -o 12000 -l 1000 ${h}/z; echo "rc=$?"`);
    expect(r.stdout.trim()).toBe('rc=0\nrc=1');
    expect(r.stderr).toMatch(/unsupported|not supported/i);
    data = readFileSync(back);
    expect(data.length).toBe(12192);
    expect(data.subarray(0, 101)).toEqual(Buffer.concat([Buffer.alloc(100), Buffer.from('x')]));
    expect(await bytes('falloc')).toBe(before + 4000);
    expect(await bytes('falloc')).toBe(regularBytes(d.backingOf(T, 'falloc')));
  });

  it('PUNCH_HOLE frees the range\'s blocks, the size and the charge unchanged; a hole past the end changes nothing', async () => {
    const h = d.home(T, 'falloc');
    const back = join(d.backingOf(T, 'falloc'), 'p');
    let r = await sh(h, `head -c 65536 /dev/zero | tr '\\0' x > ${h}/p && sync ${h}/p`);
    expect(r.code, r.stderr).toBe(0);
    const before = await bytes('falloc');
    const blocks = statSync(back).blocks;
    r = await sh(h, `fallocate -p -o 4096 -l 32768 ${h}/p; echo "rc=$?"; fallocate -p -o 70000 -l 4096 ${h}/p; echo "rc=$?"; stat -c %s ${h}/p`);
    expect(r.stdout.trim()).toBe('rc=0\nrc=0\n65536');
    const data = readFileSync(back);
    expect(data.length).toBe(65536);
    expect(data.subarray(0, 4096).every((b) => b === 0x78)).toBe(true);
    expect(data.subarray(4096, 36864).every((b) => b === 0)).toBe(true);
    expect(data.subarray(36864).every((b) => b === 0x78)).toBe(true);
    expect(statSync(back).blocks).toBe(blocks - 32768 / 512);
    expect(await bytes('falloc')).toBe(before);
    expect(await bytes('falloc')).toBe(regularBytes(d.backingOf(T, 'falloc')));
  });

  it('COLLAPSE_RANGE and INSERT_RANGE answer EOPNOTSUPP and leave the file and the ledger as they were', async () => {
    const h = d.home(T, 'falloc');
    const before = await bytes('falloc');
    const was = readFileSync(join(d.backingOf(T, 'falloc'), 'z'));
    const r = await sh(h, `fallocate -c -o 0 -l 4096 ${h}/z; echo "rc=$?"; fallocate -i -o 0 -l 4096 ${h}/z; echo "rc=$?"`);
    expect(r.stdout.trim()).toBe('rc=1\nrc=1');
    expect(r.stderr).toMatch(/unsupported|not supported/i);
    expect(readFileSync(join(d.backingOf(T, 'falloc'), 'z'))).toEqual(was);
    expect(await bytes('falloc')).toBe(before);
    // Refused like any policy answer: the home's status file, the metrics and the log say so.
    expect((await sh(h, `cat ${h}/.homesfs/status`)).stdout).toMatch(/fallocate.*z.*NOT_SUPPORTED/);
    expect(metricSample(await scrapeMetrics(metricsSocket), `homesfs_refusals_total{home="${T}/falloc",code="NOT_SUPPORTED"}`)).toBeGreaterThanOrEqual(2);
    expect(d.logs.some((l) => l.code === 'NOT_SUPPORTED' && l.home === `${T}/falloc` && l.op === 'fallocate')).toBe(true);
  });

  it('growth past the budget is EDQUOT (mode 0 and ZERO_RANGE) and charges nothing', async () => {
    const h = d.home(T, 'falloc');
    const before = await bytes('falloc');
    const room = MiB - before;
    const r = await sh(h, `fallocate -l ${room + 1} ${h}/big; echo "rc=$?"; fallocate -z -o 12192 -l ${room + 1} ${h}/z; echo "rc=$?"; stat -c %s ${h}/big ${h}/z`);
    expect(r.stdout.trim()).toBe('rc=1\nrc=1\n0\n12192');
    expect(r.stderr).toMatch(/quota exceeded/i);
    expect(await bytes('falloc')).toBe(before);
    // exactly the room is fine
    const ok = await sh(h, `fallocate -l ${room} ${h}/big && stat -c %s ${h}/big`);
    expect(ok.stdout.trim()).toBe(String(room));
    expect(await bytes('falloc')).toBe(MiB);
    expect(regularBytes(d.backingOf(T, 'falloc'))).toBe(MiB);
  });

  it('text homes: ZERO_RANGE may not cut a character (EILSEQ); zeros themselves are text', async () => {
    const h = d.home(T, 'ftext');
    const back = join(d.backingOf(T, 'ftext'), 't.txt');
    const r = await sh(h, `printf 'a\\303\\251b' > ${h}/t.txt && fallocate -z -o 2 -l 1 ${h}/t.txt; echo "rc=$?"; fallocate -z -o 1 -l 2 ${h}/t.txt; echo "rc=$?"; fallocate -z -o 4 -l 4 ${h}/t.txt; echo "rc=$?"`);
    expect(r.stdout.trim()).toBe('rc=1\nrc=0\nrc=0');
    expect(r.stderr).toMatch(/multibyte|byte sequence/i);
    expect(readFileSync(back)).toEqual(Buffer.from([0x61, 0, 0, 0x62, 0, 0, 0, 0]));
    expect(await bytes('ftext')).toBe(8);
    // a punched hole reads as zeros too: the same rule at its edges
    const p = await sh(h, `printf 'a\\303\\251b' > ${h}/p.txt && fallocate -p -o 2 -l 1 ${h}/p.txt; echo "rc=$?"; fallocate -p -o 1 -l 2 ${h}/p.txt; echo "rc=$?"`);
    expect(p.stdout.trim()).toBe('rc=1\nrc=0');
    expect(readFileSync(join(d.backingOf(T, 'ftext'), 'p.txt'))).toEqual(Buffer.from([0x61, 0, 0, 0x62]));
  });

  it('a soft byte limit: shown in status, list and metrics, one warn line per upward crossing', async () => {
    const h = d.home(T, 'soft');
    const statusText = async () => (await sh(h, `cat ${h}/.homesfs/status`)).stdout;
    const line = (text: string) => text.split('\n').find((l) => l.startsWith('soft bytes:'));
    const over = async () => metricSample(await scrapeMetrics(metricsSocket), `homesfs_home_over_soft{home="${T}/soft",tenant="${T}"}`);
    const MSG = 'home crossed its soft byte limit';

    expect(await sh(h, `head -c ${500 * KiB} /dev/zero > ${h}/a`)).toMatchObject({ code: 0 });
    expect(line(await statusText())).toBe('soft bytes:     600.0 KiB (614400 bytes), not reached');
    expect(await listed('soft')).toMatchObject({ soft: { bytes: 600 * KiB, overBytes: false, sources: { bytes: 'profile' } }, flags: [] });
    expect(await over()).toBe(0);
    const body = await scrapeMetrics(metricsSocket);
    expect(metricSample(body, `homesfs_home_soft_bytes{home="${T}/soft",tenant="${T}"}`)).toBe(600 * KiB);
    expect(metricSample(body, `homesfs_home_soft_inodes{home="${T}/soft",tenant="${T}"}`)).toBe(5);
    expect(crossings('soft', MSG)).toHaveLength(0);

    // crossing: 700 KiB; more writes while above do not warn again
    expect(await sh(h, `head -c ${200 * KiB} /dev/zero > ${h}/b && head -c ${100 * KiB} /dev/zero >> ${h}/b`)).toMatchObject({ code: 0 });
    await d.waitForLog((l) => l.msg === MSG && l.home === `${T}/soft`);
    expect(line(await statusText())).toMatch(/^soft bytes: {5}600\.0 KiB \(614400 bytes\) — EXCEEDED/);
    expect(await listed('soft')).toMatchObject({ bytes: 800 * KiB, soft: { overBytes: true }, flags: ['SOFT'] });
    const human = await ctl('list', '--tenant', T);
    expect(human.stdout).toMatch(new RegExp(`^${T}/soft\\s.*600\\.0 KiB\\s.*SOFT$`, 'm'));
    expect(await over()).toBe(1);
    expect(metricSample(await scrapeMetrics(metricsSocket), 'homesfs_homes_over_soft')).toBe(1);
    const warned = crossings('soft', MSG);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 'warn', what: 'bytes', soft: 600 * KiB, hard: MiB, profile: 'softp' });
    expect(warned[0]!.used as number).toBeGreaterThan(600 * KiB);

    // back under: no line; crossing again: a second one
    expect(await sh(h, `rm ${h}/b`)).toMatchObject({ code: 0 });
    expect((await usage('soft')).soft.overBytes).toBe(false);
    expect(await over()).toBe(0);
    expect(crossings('soft', MSG)).toHaveLength(1);
    expect(await sh(h, `fallocate -l ${150 * KiB} ${h}/c`)).toMatchObject({ code: 0 });
    expect(crossings('soft', MSG)).toHaveLength(2);
    expect(crossings('soft', MSG)[1]).toMatchObject({ used: 650 * KiB });
    // the hard limit still refuses
    const r = await sh(h, `fallocate -l ${MiB} ${h}/d; echo "rc=$?"`);
    expect(r.stdout.trim()).toBe('rc=1');
    expect(crossings('soft', MSG)).toHaveLength(2);
  });

  it('a soft inode limit warns once when a create passes it', async () => {
    const h = d.home(T, 'soft');
    const MSG = 'home crossed its soft inode limit';
    const u = await usage('soft');
    // a, c and d (d was created, then refused its growth)
    expect(u.inodes).toBe(3);
    expect(await sh(h, `touch ${h}/i1 ${h}/i2`)).toMatchObject({ code: 0 });
    expect(crossings('soft', MSG)).toHaveLength(0);
    expect(await sh(h, `mkdir ${h}/i3 && touch ${h}/i4 ${h}/i5`)).toMatchObject({ code: 0 });
    await d.waitForLog((l) => l.msg === MSG && l.home === `${T}/soft`);
    expect(crossings('soft', MSG)).toHaveLength(1);
    expect(crossings('soft', MSG)[0]).toMatchObject({ what: 'inodes', used: 6, soft: 5, hard: 1_000_000 });
    expect(await listed('soft')).toMatchObject({ soft: { overInodes: true } });
    expect((await sh(h, `cat ${h}/.homesfs/status`)).stdout).toMatch(/^soft inodes: {4}5 — EXCEEDED/m);
  });

  it('set-limits sets a per-home soft limit (at most the hard limit), shown with its source', async () => {
    let r = await ctl('set-limits', `${T}/soft2`, '--soft-size', '2M');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/soft limit must be at most its hard limit/);
    // checked against a hard limit changed in the same request; nothing is stored when refused
    r = await ctl('set-limits', `${T}/soft2`, '--inodes', '10', '--soft-inodes', '11');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/softInodes \(11\) must be at most maxInodes \(10\)/);
    expect(await usage('soft2')).toMatchObject({ soft: { inodes: 0 } });
    r = await ctl('--json', 'set-limits', `${T}/soft2`, '--soft-size', '100K', '--soft-inodes', '1');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ soft: { bytes: 100 * KiB, inodes: 1, sources: { bytes: 'override', inodes: 'override' }, profile: { bytes: 0, inodes: 0 } } });
    expect(await sh(d.home(T, 'soft2'), `head -c ${101 * KiB} /dev/zero > ${d.home(T, 'soft2')}/x`)).toMatchObject({ code: 0 });
    expect(await listed('soft2')).toMatchObject({ soft: { overBytes: true }, flags: ['SOFT'] });
    expect(crossings('soft2', 'home crossed its soft byte limit')).toHaveLength(1);
    r = await ctl('usage', `${T}/soft2`);
    expect(r.stdout).toMatch(/Soft limits:\s+bytes 100\.0 KiB \(102400 bytes\) \(override; profile fbudget: off\) — EXCEEDED; inodes 1 \(override; profile fbudget: off\)/);
    // dropped: the profile's (off) again
    r = await ctl('--json', 'set-limits', `${T}/soft2`, '--soft-size', 'default', '--soft-inodes', 'default');
    expect(JSON.parse(r.stdout)).toMatchObject({ soft: { bytes: 0, inodes: 0, overBytes: false, sources: { bytes: 'profile' } }, flags: [] });
  });
});
