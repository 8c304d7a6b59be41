import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema } from '../../src/config/schema.js';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { regularBytes } from '../helpers/backing.js';
import { canMount, HOMESCTL, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { metricSample, scrapeMetrics } from '../helpers/metrics.js';
import { ownersFrom, type Owner } from '../helpers/owner-suite.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Every `fuse.*` switch that moves serving into C, one at a time: the
 * TypeScript path is the specification, so a daemon with one switch off (and
 * every other default on; what depends on the switch goes with it, as the
 * daemon does) must answer the same random syscall sequences exactly as the
 * reference daemon with every default on, which serves every variant's homes.
 * Each home kind is served by both (a binary `home` home and a `posix` one
 * whose budgets the sequences meet, a `scratch` text home), each with its own
 * owner. The owner, a peer (another uid the kernel lets past the modes, so
 * that the daemon's own per-uid rules answer it) and another uid (refused by
 * the kernel at the home's root) run the sequence interleaved, as real
 * processes, and every result, the final trees (through the mount and on the
 * backing) and the ledgers must be equal. The counters then show that the
 * reference served natively what the daemon with the switch off served in
 * JavaScript, else the comparison proved nothing.
 *
 * Passthrough (fuse.passthrough) is off on every daemon here, and has no
 * variant: it changes no answer of the daemon's but the kernel's I/O mode of
 * a file's writers (direct I/O while the file is passed through), and the
 * kernel cuts a cached write at a page it must first read, a direct one not,
 * so a write across a limit lands short in one mode and is refused whole in
 * the other. passthrough.test.ts holds its bytes and refusals instead.
 *
 * Black-box: only the mount, the configuration, homesctl and the metrics
 * endpoint. The seed is printed; SWITCH_DIFF_SEED=<n> replays a run, and
 * SWITCH_DIFF_KEEP=<dir> keeps both records of every home and the logs.
 */

if (!canMount) console.warn(`switch-diff integration suite skipped: ${skipReason}`);

const KiB = 1024;
const T = 'sw';
const PROBE = join(import.meta.dirname, 'fixtures', 'switch_probe.py');
const SEED = process.env.SWITCH_DIFF_SEED !== undefined ? Number(process.env.SWITCH_DIFF_SEED) : 1 + Math.floor(Math.random() * 1e9);
/** a directory to keep both records of every home and both daemons' logs in, to read a difference */
const KEEP = process.env.SWITCH_DIFF_KEEP;
/** the uids of this file only (owners, peers, others: helpers/owner-ids.ts) */
const UID_BASE = ownerRange(import.meta.filename).from;
/** one uid's open files across homes (limits.openFilesPerUid): the cap phase meets it */
const PER_UID = 10;
const OPS = 260;

type Kind = 'bin' | 'txt' | 'psx';
const KINDS: readonly Kind[] = ['bin', 'txt', 'psx'];
/**
 * Per kind: the profile, its per-file cap and its budget. The binary homes'
 * budgets leave room for byte credit (the ledger reserves a quarter of the
 * free room, and none below 64 KiB), so that the binding decides writes'
 * growth, per-file cap included; the prologue still meets the budget.
 */
const PROFILE: Record<Kind, { name: string; maxFile: number; budget: number }> = {
  bin: { name: 'hb', maxFile: 64 * KiB, budget: 512 * KiB },
  txt: { name: 'tx', maxFile: 16 * KiB, budget: 40 * KiB },
  psx: { name: 'px', maxFile: 64 * KiB, budget: 512 * KiB },
};
const PROFILES = {
  hb: { ...BUILTIN_PROFILES.home, maxHomeBytes: PROFILE.bin.budget, maxFileBytes: PROFILE.bin.maxFile, maxInodes: 28, maxOpenFiles: 14 },
  tx: { ...BUILTIN_PROFILES.scratch, maxHomeBytes: PROFILE.txt.budget, maxFileBytes: PROFILE.txt.maxFile, maxInodes: 24, maxEntriesPerDir: 10, maxOpenFiles: 12 },
  px: { ...BUILTIN_PROFILES.posix, maxHomeBytes: PROFILE.psx.budget, maxFileBytes: PROFILE.psx.maxFile, maxInodes: 28, maxOpenFiles: 14 },
};

/** the switches that move serving into C: every `fuse.*` boolean on by default (a test below holds the list to the schema) */
const SWITCHES = ['nativeFastPath', 'nativeUnlink', 'nativeOpen', 'nativeCreate', 'nativeMkdir', 'nativeSymlink', 'nativeLink', 'nativeRmdir', 'nativeRename', 'nativeSetattr', 'nativeRelease', 'nativeRead', 'nativeWrite', 'nativeWriteDecision', 'nativeTruncate', 'singleReader', 'noFlush', 'readdirplus'] as const;
type Switch = (typeof SWITCHES)[number];

/** What a daemon counted of its native serving (status --verbose --json's native block, the data plane's metrics), and its homes' ledgers. */
interface Counters {
  status: {
    native: Record<string, unknown> & { fastPath?: Record<string, number>; releasesAnswered?: number; noFlush?: { opens: number }; singleReader?: { on: boolean; handoffs: number } };
    homes: Array<{ tenant: string; key: string; bytes?: number; inodes?: number }>;
  };
  metrics: string;
}
const fp = (c: Counters, k: string) => c.status.native.fastPath?.[k] ?? 0;
const metric = (c: Counters, series: string) => metricSample(c.metrics, series);

/**
 * A variant: the switches it turns off, and the counter that shows the
 * native path ran (more of it on the reference during the run, none on the
 * variant's daemon). Switches that depend on one that is off (the schema's
 * "with the fast path", "with native opens", "with nativeWrite") go with it.
 */
interface Variant {
  name: string;
  off: Partial<Record<Switch, false>>;
  native: (c: Counters) => number;
  /** for the data plane: what JavaScript served instead (more on the variant's daemon than on the reference) */
  js?: (c: Counters) => number;
}
const jsData = (c: Counters) => metric(c, 'homesfs_fuse_requests_total{op="read"}') + metric(c, 'homesfs_fuse_requests_total{op="write"}');
const VARIANTS: Variant[] = [
  { name: 'nativeFastPath', off: { nativeFastPath: false }, native: (c) => fp(c, 'answered') + fp(c, 'readdirAnswered') + fp(c, 'fgetattrAnswered') },
  { name: 'nativeUnlink', off: { nativeUnlink: false }, native: (c) => fp(c, 'unlinkAnswered') },
  { name: 'nativeOpen', off: { nativeOpen: false }, native: (c) => fp(c, 'openAnswered') },
  { name: 'nativeCreate', off: { nativeCreate: false }, native: (c) => fp(c, 'createAnswered') },
  // Directories made in the binding with create slots' inodes (fastpath_create.c hs_fastpath_mkdir).
  { name: 'nativeMkdir', off: { nativeMkdir: false }, native: (c) => fp(c, 'mkdirAnswered') },
  // Symlinks made in the binding with create slots' inodes (fastpath_create.c hs_fastpath_symlink).
  { name: 'nativeSymlink', off: { nativeSymlink: false }, native: (c) => fp(c, 'symlinkAnswered') },
  // Hard links made in the binding with create slots' inodes (fastpath_create.c hs_fastpath_link).
  { name: 'nativeLink', off: { nativeLink: false }, native: (c) => fp(c, 'linkAnswered') },
  { name: 'nativeRmdir', off: { nativeRmdir: false }, native: (c) => fp(c, 'rmdirAnswered') },
  // Regular files renamed within a home in the binding (fastpath_unlink.c hs_fastpath_rename).
  { name: 'nativeRename', off: { nativeRename: false }, native: (c) => fp(c, 'renameAnswered') },
  { name: 'nativeSetattr', off: { nativeSetattr: false }, native: (c) => fp(c, 'utimensAnswered') + fp(c, 'chmodAnswered') + fp(c, 'chownAnswered') },
  { name: 'nativeRelease', off: { nativeRelease: false }, native: (c) => c.status.native.releasesAnswered ?? 0 },
  { name: 'nativeRead', off: { nativeRead: false }, native: (c) => metric(c, 'homesfs_native_reads_total'), js: (c) => metric(c, 'homesfs_fuse_requests_total{op="read"}') },
  { name: 'nativeWrite', off: { nativeWrite: false }, native: (c) => metric(c, 'homesfs_native_writes_total'), js: (c) => metric(c, 'homesfs_fuse_requests_total{op="write"}') },
  { name: 'nativeWriteDecision', off: { nativeWriteDecision: false }, native: (c) => fp(c, 'writesDecided') },
  // ftruncate of a handed-over inode in the binding (fastpath_write.c hs_fastpath_wl_resize_begin).
  { name: 'nativeTruncate', off: { nativeTruncate: false }, native: (c) => fp(c, 'truncatesDecided') },
  { name: 'singleReader', off: { singleReader: false }, native: (c) => (c.status.native.singleReader?.on ? c.status.native.singleReader.handoffs : 0) },
  { name: 'noFlush', off: { noFlush: false }, native: (c) => c.status.native.noFlush?.opens ?? 0 },
  // Listings answered with attributes (session/ops_dirs_plus.c): the kernel's READDIRPLUS requests.
  { name: 'readdirplus', off: { readdirplus: false }, native: (c) => (c.status.native.protocol as { readdirplus?: number } | undefined)?.readdirplus ?? 0 },
  // Both halves of the data plane off: every READ and WRITE of binary homes in JavaScript.
  { name: 'dataPlane', off: { nativeRead: false, nativeWrite: false }, native: (c) => metric(c, 'homesfs_native_reads_total') + metric(c, 'homesfs_native_writes_total'), js: jsData },
];

/**
 * A variant's homes: one per kind, each with its owner, and a peer and an
 * other uid of each home's own, which own nothing (a uid's open files are
 * capped across homes, and the homes of a variant are played at once).
 */
function homesOf(v: number): { homes: Record<string, { owner: Owner; profile: string }>; keys: Record<Kind, string>; uids: Record<Kind, Record<Who, Owner>> } {
  const ids = ownersFrom(UID_BASE + v * 10, KINDS.flatMap((k) => [k, `${k}-peer`, `${k}-other`]));
  const keys = Object.fromEntries(KINDS.map((k) => [k, `${VARIANTS[v]!.name.toLowerCase()}-${k}`])) as Record<Kind, string>;
  const homes = Object.fromEntries(KINDS.map((k) => [`${T}/${keys[k]}`, { owner: ids[k]!, profile: PROFILE[k].name }]));
  const uids = Object.fromEntries(KINDS.map((k) => [k, { owner: ids[k]!, peer: ids[`${k}-peer`]!, other: ids[`${k}-other`]! }])) as Record<Kind, Record<Who, Owner>>;
  return { homes, keys, uids };
}

/** mulberry32: the same sequence for both daemons. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Who runs a step: the home's owner; a peer, another uid with
 * CAP_DAC_OVERRIDE (the kernel's permission checks let it into the owner's
 * 0700 home, so the daemon's own per-uid rules answer it: slots, caps, owners
 * of what it creates, chmod and chown of what it does not own); another uid
 * without it, which the kernel refuses at the home's root. Or a barrier the
 * test itself waits at until no RELEASE is in flight ('settle').
 */
type Who = 'owner' | 'peer' | 'other';
type Step = { who: Who; op: unknown[] } | { who: 'settle' };

const FILES = ['f0', 'f1', 'f2', 'f3', 'd0/f0', 'd0/f1', 'd1/d2/f0', '<bad>'];
const DIRS = ['d0', 'd1', 'd1/d2', 'd3', 'd0/d4'];
const LINKS = ['l0', 'l1', 'd0/l2'];
// The FIFO 'p0' is never opened, nor the source of a rename or link, and no symlink points to it: an open of it would block.
const NAMES = [...FILES, ...DIRS, ...LINKS, 'p0', '.'];
const OPENABLE = NAMES.filter((n) => n !== 'p0');
/**
 * Symlink targets. Every one resolves inside this daemon's mount (or nowhere)
 * from wherever a link is moved: the peer may write whatever a link leads to
 * (CAP_DAC_OVERRIDE), so no target may lead to a file of the host. Relative
 * ones climb at most two levels (a home's root is two below the mount's);
 * absolute ones name the home or the mount ('<home>', '<mount>', put in by
 * the probe), or a directory that does not exist.
 */
const TARGETS = ['f0', 'd0/f1', '../f1', 'd0', '<home>/f0', '<home>/d0', `<mount>/${T}`, '/nonexistent-homesfs-switch-diff/x', `../../${T}/x`, 'nowhere', 'n\udcffx'];
const OWNER_FLAGS = ['r', 'r', 'r', 'r_nofollow', 'r_dir', 'w_trunc', 'rw', 'rw', 'rw', 'append', 'creat', 'creat', 'creat', 'creat_trunc', 'excl', 'excl_rdonly', 'creat_append'];
const PEER_FLAGS = ['r', 'r', 'r_nofollow', 'rw', 'w_trunc', 'creat', 'creat', 'excl', 'append'];
const FILE_MODES = [0o600, 0o644, 0o666, 0o755, 0o777, 0o400, 0o4755, 0o2775, 0o1777, 0o000];
const DIR_MODES = [0o700, 0o755, 0o777, 0o1777, 0o2755, 0o500];
const CONTENT = ['a', 'a', 'a', 'a', 'u', 'u', 'x', 'h'];

type Gen = () => unknown[];
/** one op drawn from a table of [weight, generator] */
function table(r: () => number, rows: Array<[number, Gen]>): Gen {
  const total = rows.reduce((n, [w]) => n + w, 0);
  return () => {
    let x = r() * total;
    for (const [w, g] of rows) if ((x -= w) < 0) return g();
    return rows[rows.length - 1]![1]();
  };
}

/**
 * The op list for one home: a fixed prologue (the file the cap phase opens,
 * directories, the per-file cap and the home's budget met, renames of closed
 * files), a random middle
 * of the owner's, the peer's and the other's syscalls, and the caps phase
 * (creates and opens until a cap refuses them, the owner's and the peer's,
 * after barriers that wait until no RELEASE is in flight: close(2) returns
 * before its RELEASE is served, and a count at a cap must not depend on that).
 */
function sequence(seed: number, kind: Kind, u: Record<Who, Owner>): Step[] {
  const r = rng(seed);
  const pick = <X>(xs: readonly X[]): X => xs[Math.floor(r() * xs.length)]!;
  const int = (n: number) => Math.floor(r() * n);
  const M = PROFILE[kind].maxFile;
  const lens = [1, 2, 100, 4095, 4096, 4097, 10_000, M >> 1, M - 1, M, M + 1];
  const offset = (len: number) => {
    const x = r();
    if (x < 0.4) return int(M * 1.1);
    if (x < 0.7) return Math.max(0, M - len + pick([-4096, -1, 0, 1, 4096]));
    return 0;
  };
  const file = () => (r() < 0.75 ? pick(FILES) : pick(OPENABLE));
  const letter = () => 65 + int(26);
  const times = (): [number | null, number | null] => (r() < 0.3 ? [null, null] : [1_600_000_000_000_000_000 + int(1e12), 1_500_000_000_000_000_000 + int(1e12)]);
  // chown's uid and gid: self, the other party, or -1 (unchanged)
  const ids = (self: Owner, them: Owner) => [pick([self.uid, self.uid, them.uid, -1]), pick([self.gid, self.gid, them.gid, -1])];
  const writes = (slots: number): Array<[number, Gen]> => [
    [12, () => { const len = pick(lens); return ['pwrite', int(slots), offset(len), len, pick(CONTENT), letter()]; }],
    [5, () => ['write', int(slots), pick(lens), pick(CONTENT), letter()]],
    [6, () => ['pread', int(slots), int(M * 1.1), pick(lens)]],
    [3, () => ['read', int(slots), pick(lens)]],
    [3, () => ['ftruncate', int(slots), int(M * 1.1)]],
    [3, () => ['truncate', pick(FILES), int(M * 1.1)]],
    [3, () => ['fstat', int(slots)]],
  ];
  const owner = table(r, [
    [16, () => ['open', int(4), file(), pick(OWNER_FLAGS), pick(FILE_MODES)]],
    [7, () => ['close', int(4)]],
    ...writes(4),
    [2, () => ['seek', int(4), int(M)]],
    [2, () => ['fallocate', int(4), int(M), pick([1, 4096, 30_000])]],
    [1, () => ['fsync', int(4)]],
    [5, () => [pick(['stat', 'lstat']), pick(NAMES)]],
    [1, () => ['access', pick(NAMES), pick([4, 2, 1, 6])]],
    [4, () => ['chmod', pick(NAMES), pick(FILE_MODES)]],
    [1, () => ['fchmod', int(4), pick(FILE_MODES)]],
    [3, () => ['chown', pick(NAMES), ...ids(u.owner, u.peer)]],
    [3, () => ['utime', pick(NAMES), ...times()]],
    [3, () => ['mkdir', pick(DIRS), pick(DIR_MODES)]],
    [2, () => ['rmdir', pick(DIRS)]],
    [3, () => ['rename', pick(OPENABLE.filter((n) => n !== '.')), pick(NAMES.filter((n) => n !== '.'))]],
    [4, () => ['unlink', pick(NAMES)]],
    [2, () => ['link', pick(FILES), pick([...LINKS, ...FILES])]],
    [2, () => ['symlink', pick(TARGETS), pick(LINKS)]],
    [1, () => ['readlink', pick(LINKS)]],
    [1, () => ['mkfifo', 'p0', 0o644]],
    [3, () => ['listdir', pick(['.', ...DIRS])]],
  ]);
  const peer = table(r, [
    [14, () => ['open', int(3), file(), pick(PEER_FLAGS), pick(FILE_MODES)]],
    [5, () => ['close', int(3)]],
    ...writes(3),
    [3, () => ['stat', pick(NAMES)]],
    [2, () => ['listdir', pick(['.', ...DIRS])]],
    [3, () => ['chmod', pick(NAMES), pick(FILE_MODES)]],
    [2, () => ['chown', pick(NAMES), ...ids(u.peer, u.owner)]],
    [3, () => ['utime', pick(NAMES), ...times()]],
    [3, () => ['unlink', pick(FILES)]],
    [3, () => ['mkdir', pick(DIRS), pick(DIR_MODES)]],
    [3, () => ['rename', pick(FILES), pick(FILES)]],
    [1, () => [pick(['symlink', 'link']), pick(['f0', 'd0/f0']), pick(LINKS)]],
  ]);
  const other = table(r, [
    [4, () => ['open', int(2), file(), pick(PEER_FLAGS), 0o644]],
    [1, () => ['close', int(2)]],
    [2, () => ['stat', pick(NAMES)]],
    [1, () => ['listdir', pick(['.', ...DIRS])]],
    [1, () => ['chmod', pick(NAMES), 0o777]],
    [1, () => ['unlink', pick(FILES)]],
    [1, () => ['mkdir', pick(DIRS), 0o777]],
    [1, () => ['utime', pick(NAMES), null, null]],
  ]);
  const O = (...op: unknown[]): Step => ({ who: 'owner', op });
  const P = (...op: unknown[]): Step => ({ who: 'peer', op });
  const X = (...op: unknown[]): Step => ({ who: 'other', op });
  const steps: Step[] = [
    O('chmod', '.', 0o755),
    O('open', 0, 'keep', 'creat', 0o644),
    O('write', 0, 10, 'a', 75),
    O('close', 0),
    O('mkdir', 'd0', 0o777),
    O('mkdir', 'd1', 0o755),
    O('mkdir', 'd1/d2', 0o700),
    // An empty directory made and removed (the random middle's rmdirs mostly meet full ones), and a full one refused.
    O('mkdir', 'd3', 0o755),
    O('rmdir', 'd3'),
    O('rmdir', 'd1'),
    // The per-file cap; then the home's budget, filled until refused, and room made again.
    O('open', 0, 'f0', 'creat', 0o644),
    O('pwrite', 0, 0, M, 'a', 66),
    O('pwrite', 0, M, 1, 'a', 66),
    O('pwrite', 0, M - 1, 2, 'a', 66),
    O('open', 0, 'f0', 'creat_append', 0o644),
    O('write', 0, 1, 'a', 66),
    O('close', 0),
  ];
  const fills = Math.floor(PROFILE[kind].budget / M) + 1;
  for (let k = 0; k < fills; k++) steps.push(O('open', 1, `fill${k}`, 'excl', 0o600), O('pwrite', 1, 0, M, 'a', 67 + k), O('close', 1));
  // Once every RELEASE is served, renames of closed files: to a new name, and over another (its bytes freed).
  steps.push({ who: 'settle' }, O('rename', 'fill0', 'fillr'), O('rename', 'fill1', 'fill2'));
  // Symlinks once create slots are granted: targets that stay in, climb out, and an absolute one.
  steps.push(O('symlink', 'f0', 'l0'), O('symlink', '../f1', 'd0/l2'), O('symlink', `../../${T}/x`, 'l1'), O('symlink', '<home>/f0', 'l1'), O('unlink', 'l1'));
  for (let k = 0; k < fills; k++) steps.push(O('unlink', `fill${k}`));
  steps.push(O('unlink', 'fillr'));
  // Hard links of a closed file the random middle may not make (its sources rarely exist): beside it, into a
  // directory, onto an existing name (EEXIST), then removed again (each name an inode given back).
  steps.push(O('link', 'keep', 'kl'), O('link', 'keep', 'd0/kl'), O('link', 'keep', 'f0'), O('stat', 'keep'), O('unlink', 'kl'), O('unlink', 'd0/kl'));
  for (let i = 0; i < OPS; i++) {
    const x = r();
    steps.push(x < 0.65 ? O(...owner()) : x < 0.9 ? P(...peer()) : X(...other()));
  }
  // The caps. The owner holds a few opens (slots granted to it are left over), then the peer opens until its uid's cap;
  // the owner creates until its uid's cap, and the peer opens beside those until the home's; the peer creates, and the owner opens beside.
  steps.push(O('closeall'), P('closeall'), X('closeall'), { who: 'settle' });
  steps.push(O('opencap', 'keep', 'r', 3), P('opencap', 'keep', 'r', 40), X('opencap', 'keep', 'r', 2), O('drop'), P('drop'), { who: 'settle' });
  steps.push(O('opencap', 'capc%d', 'excl', 40), P('opencap', 'keep', 'r', 40), O('drop'), P('drop'), { who: 'settle' });
  steps.push(P('opencap', 'capp%d', 'excl', 40), O('opencap', 'keep', 'r', 40), O('drop'), P('drop'), O('listdir', '.'));
  return steps;
}

/** A probe process of one uid in one home, driven one op at a time. */
class Probe {
  private readonly proc: ChildProcess;
  private readonly lines: AsyncIterator<string>;
  private stderr = '';

  constructor(who: Owner, root: string, caps: string[] = []) {
    const keep = caps.flatMap((c) => [`--inh-caps=+${c}`, `--ambient-caps=+${c}`]);
    this.proc = spawn('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', ...keep, 'python3', PROBE, 'serve', root], {
      env: { PATH: SYSTEM_PATH, LANG: 'C.UTF-8' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.lines = createInterface({ input: this.proc.stdout! })[Symbol.asyncIterator]();
  }

  async run(op: unknown[]): Promise<unknown> {
    this.proc.stdin!.write(JSON.stringify(op) + '\n');
    const next = await this.lines.next();
    if (next.done) throw new Error(`probe ended at ${JSON.stringify(op)}: ${this.stderr}`);
    return JSON.parse(next.value) as unknown;
  }

  async end(): Promise<void> {
    const exited = new Promise((resolve) => this.proc.once('exit', resolve));
    this.proc.stdin!.end();
    await exited;
    if (this.stderr !== '') throw new Error(`probe wrote to stderr: ${this.stderr}`);
  }
}

async function ctlJson(d: RunningDaemon, ...args: string[]): Promise<Record<string, unknown>> {
  const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', ...args]);
  if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')}: ${r.stderr}${r.stdout}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

/**
 * Until the home has no file and the daemon no directory handle open: every
 * RELEASE the kernel queued has been served. The owner's probe waits on the
 * home's status file first (cheap); the daemon's status then has the final word.
 */
async function settle(d: RunningDaemon, key: string, owner: Probe, where: string): Promise<void> {
  const seen = await owner.run(['settle']);
  if (seen !== 'ok') throw new Error(`${where}: the home's status file still counts open files 10 s after every probe closed its own`);
  for (let i = 0; i < 400; i++) {
    const s = (await ctlJson(d, 'status')) as { homes: Array<{ key: string; openFiles?: number }>; limits?: { dirHandles?: { open: number } } };
    const h = s.homes.find((x) => x.key === key);
    if (h?.openFiles === 0 && (s.limits?.dirHandles?.open ?? 0) === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`${where}: files or directories still open 10 s after every probe closed its own`);
}

/** The home's tree through the mount and on the backing, read by root. */
async function dump(home: string, backing: string): Promise<{ mount: Record<string, unknown>; backing: Record<string, unknown> }> {
  const r = await runAsync('python3', [PROBE, 'dump', home, backing], { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`dump ${home}: ${r.stderr}`);
  return JSON.parse(r.stdout) as { mount: Record<string, unknown>; backing: Record<string, unknown> };
}

interface Played {
  results: Array<{ who: string; op: unknown[]; r: unknown }>;
  mount: Record<string, unknown>;
  backing: Record<string, unknown>;
  /** the bytes of the backing's regular files */
  disk: number;
}

/** Run the steps in one home of d (owner, peer and other interleaved), then read back its tree. `where` names the run in errors. */
async function play(d: RunningDaemon, key: string, u: Record<Who, Owner>, steps: Step[], where: string): Promise<Played> {
  const root = d.home(T, key);
  const probes = { owner: new Probe(u.owner, root), peer: new Probe(u.peer, root, ['dac_override']), other: new Probe(u.other, root) };
  const results: Played['results'] = [];
  try {
    for (const s of steps) {
      if (s.who === 'settle') await settle(d, key, probes.owner, where);
      else results.push({ who: s.who, op: s.op, r: await probes[s.who].run(s.op) });
    }
  } finally {
    await Promise.all(Object.values(probes).map((p) => p.end()));
  }
  return { results, ...(await dump(root, d.backingOf(T, key))), disk: regularBytes(d.backingOf(T, key)) };
}

/** The first entry where two records differ, said so that it can be replayed. */
function firstDifference(a: Played, b: Played): string | null {
  for (let i = 0; i < Math.max(a.results.length, b.results.length); i++) {
    const x = a.results[i];
    const y = b.results[i];
    if (JSON.stringify(x) !== JSON.stringify(y)) {
      const before = a.results.slice(Math.max(0, i - 6), i).map((e, j) => `    #${i - Math.min(i, 6) + j} ${e.who} ${JSON.stringify(e.op)} -> ${JSON.stringify(e.r)}`);
      return `step #${i} ${x?.who} ${JSON.stringify(x?.op)}: reference ${JSON.stringify(x?.r)}, switched off ${JSON.stringify(y?.r)}\n  after:\n${before.join('\n')}`;
    }
  }
  return null;
}

async function counters(d: RunningDaemon, metricsSocket: string): Promise<Counters> {
  return { status: (await ctlJson(d, 'status', '--verbose')) as unknown as Counters['status'], metrics: await scrapeMetrics(metricsSocket) };
}

describe.skipIf(!canMount)('every native switch off on its own answers as the reference (all on) does', () => {
  let tmp: string;
  let ref: RunningDaemon;
  let refMetrics: string;
  const all = VARIANTS.map((_, i) => homesOf(i));

  const config = (metrics: string, off: Partial<Record<Switch, false>>) => ({
    owners: ownerRange(import.meta.filename),
    profiles: PROFILES,
    limits: { openFilesPerUid: PER_UID },
    metrics: { socket: metrics },
    // Every stat reaches the daemon (none is answered from the kernel's cache): answers are compared, not caches.
    // singleReader is off by default: on here, so that its variant turns it off as every other's does.
    fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0, passthrough: false, singleReader: true, ...off },
  });
  const start = async (homes: Record<string, { owner: Owner; profile: string }>, metrics: string, off: Partial<Record<Switch, false>>) => {
    const d = await startDaemon({ homes, create: Object.keys(homes), config: config(metrics, off) });
    for (const id of Object.keys(homes)) await d.waitForLog((l) => l.msg === 'home ledger built' && l.home === id);
    return d;
  };

  beforeAll(async () => {
    console.log(`switch-diff: seed ${SEED} (SWITCH_DIFF_SEED=${SEED} replays this run)`);
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-swd-'));
    chmodSync(tmp, 0o755);
    refMetrics = join(tmp, 'ref-metrics.sock');
    ref = await start(Object.assign({}, ...all.map((h) => h.homes)) as Record<string, { owner: Owner; profile: string }>, refMetrics, {});
  }, 60_000);

  afterAll(async () => {
    await ref?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('has a variant for every switch of the schema', () => {
    const defaults = ConfigSchema.shape.fuse.parse(undefined) as Record<string, unknown>;
    // passthrough: no variant (the comment at the top says why); singleReader: off by default, on in the reference here.
    const schema = Object.keys(defaults).filter((k) => (defaults[k] === true && k !== 'passthrough') || k === 'singleReader');
    expect([...SWITCHES].sort()).toEqual(schema.sort());
    for (const s of SWITCHES) expect(VARIANTS.some((v) => v.name === s && Object.keys(v.off).join() === s), s).toBe(true);
  });

  /** One home of the variant played on both daemons, every result and both trees compared; its disk usage on each for the ledgers. */
  const compare = async (v: Variant, vi: number, off: RunningDaemon, kind: Kind): Promise<{ where: string; disk: [number, number] }> => {
    const seed = SEED + vi * 7 + KINDS.indexOf(kind);
    const where = `${v.name} off, ${kind} home, seed ${seed} (SWITCH_DIFF_SEED=${SEED})`;
    const { keys, uids } = all[vi]!;
    const steps = sequence(seed, kind, uids[kind]);
    const [a, b] = await Promise.all([play(ref, keys[kind], uids[kind], steps, `${where}, reference`), play(off, keys[kind], uids[kind], steps, `${where}, switched off`)]);
    if (KEEP) writeFileSync(join(KEEP, `${v.name}-${kind}.json`), JSON.stringify({ reference: a, off: b }, null, 1));
    // Not a vacuous sequence: the limits came up on the reference.
    const seen = JSON.stringify(a.results.map((e) => e.r));
    for (const e of kind === 'txt' ? ['EDQUOT', 'EFBIG', 'EMFILE', 'EILSEQ'] : ['EDQUOT', 'EFBIG', 'EMFILE']) expect(seen.includes(`"${e}"`), `${where}: ${e} never came up`).toBe(true);
    expect(firstDifference(a, b), where).toBeNull();
    expect(b.mount, `${where}: the tree through the mount`).toEqual(a.mount);
    expect(b.backing, `${where}: the tree on the backing`).toEqual(a.backing);
    return { where, disk: [a.disk, b.disk] };
  };

  it.each(VARIANTS.map((v, i) => [v.name, i] as const))('%s off', async (_name, vi) => {
    const v = VARIANTS[vi]!;
    const offMetrics = join(tmp, `${v.name}-metrics.sock`);
    const off = await start(all[vi]!.homes, offMetrics, v.off);
    try {
      const before = await counters(ref, refMetrics);
      // The three homes at once (each has uids of its own); a failure waits for the others to end.
      const outcomes = await Promise.allSettled(KINDS.map((kind) => compare(v, vi, off, kind)));
      if (KEEP) for (const [side, d] of [['ref', ref], ['off', off]] as const) writeFileSync(join(KEEP, `${v.name}-${side}.log`), d.logs.map((l) => JSON.stringify(l)).join('\n'));
      const compared = outcomes.map((o) => {
        if (o.status === 'rejected') throw o.reason;
        return o.value;
      });
      const after = await counters(ref, refMetrics);
      const mine = await counters(off, offMetrics);
      // The ledgers: equal, and each equal to its disk.
      for (const [ki, kind] of KINDS.entries()) {
        const { where, disk } = compared[ki]!;
        const [la, lb] = [after, mine].map((c) => c.status.homes.find((h) => h.tenant === T && h.key === all[vi]!.keys[kind]));
        expect({ bytes: lb?.bytes, inodes: lb?.inodes }, `${where}: the ledger`).toEqual({ bytes: la?.bytes, inodes: la?.inodes });
        expect(la?.bytes, `${where}: the reference's ledger against its disk`).toBe(disk[0]);
        expect(lb?.bytes, `${where}: the ledger against the disk`).toBe(disk[1]);
      }
      // No count was clamped at 0 on either: a clamp hides a missed charge that a later release can cancel out.
      for (const [side, d] of [['reference', ref], ['switched off', off]] as const) {
        expect(d.logs.filter((l) => l.msg.startsWith('ledger underflow')), `${v.name}: the ${side} daemon's ledger underflows (seed ${SEED})`).toEqual([]);
      }
      // And the comparison was between the native path and JavaScript's.
      expect(v.native(after) - v.native(before), `${v.name}: the reference served natively (seed ${SEED})`).toBeGreaterThan(0);
      expect(v.native(mine), `${v.name}: the daemon with it off served nothing natively (seed ${SEED})`).toBe(0);
      if (v.js) expect(v.js(mine), `${v.name}: JavaScript served what the reference's binding did (seed ${SEED})`).toBeGreaterThan(v.js(after) - v.js(before));
    } finally {
      await off.stop();
    }
  }, 120_000);
});
