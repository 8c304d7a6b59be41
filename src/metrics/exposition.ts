/**
 * The Prometheus text exposition format (version 0.0.4), written by hand: it
 * is a few lines of `name{labels} value`, and a client library would put its
 * own label hashing and allocation on the per-request path.
 */
import type { DataPlaneStats } from '../fs/native-api.js';
import { LATENCY_BUCKETS, type OpStats } from './ops.js';

export interface HomeSample {
  tenant: string;
  key: string;
  bytes: number;
  inodes: number;
  /** 0 = off */
  budget: number;
  inodeCap: number;
  /** soft limits in force, 0 = off */
  softBytes: number;
  softInodes: number;
  /** usage above either soft limit */
  overSoft: boolean;
  openHandles: number;
}

export interface MetricsSnapshot {
  homes: HomeSample[];
  tenants: Array<{ tenant: string; bytes: number; budget: number }>;
  refusals: Array<{ home: string; code: string; count: number }>;
  ops: OpStats[];
  /** the binding's data plane (fuse.nativeRead / nativeWrite); absent when both are off */
  dataPlane?: DataPlaneSample;
  uptimeSeconds: number;
  /** the daemon serves its mount (mounted, FUSE loop running, self-check not failed); absent: not reported */
  mountUp?: boolean;
  /** open files of all homes against their shared cap (limits.nofile − limits.reserveFiles − the loaded homes' descriptors) */
  openFiles?: { total: number; cap: number };
  /** counts any home's ledger clamped at 0 since start (each a missed charge, logged); absent: not reported */
  ledgerUnderflows?: number;
}

/** The binding's data-plane counters, as FsContext reports them. */
export type DataPlaneSample = DataPlaneStats;

/** Label values: backslash, double quote and newline are escaped (the format's rules). */
export function labelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function labels(l: Record<string, string>): string {
  const parts = Object.entries(l).map(([k, v]) => `${k}="${labelValue(v)}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

function num(n: number): string {
  if (Number.isNaN(n)) return 'NaN';
  if (n === Infinity) return '+Inf';
  if (n === -Infinity) return '-Inf';
  return String(n);
}

export function renderMetrics(s: MetricsSnapshot): string {
  const out: string[] = [];
  const family = (name: string, type: string, help: string, rows: Array<[Record<string, string>, number]>): void => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [l, v] of rows) out.push(`${name}${labels(l)} ${num(v)}`);
  };
  const home = (h: HomeSample) => ({ home: `${h.tenant}/${h.key}`, tenant: h.tenant });
  family('homesfs_up_seconds', 'gauge', 'Seconds since the daemon started.', [[{}, s.uptimeSeconds]]);
  if (s.mountUp !== undefined) {
    family('homesfs_mount_up', 'gauge', 'Whether the mount is served: 1 while mounted, the FUSE loop runs and the mount probes pass (as GET /healthz), else 0.', [[{}, s.mountUp ? 1 : 0]]);
  }
  family('homesfs_home_bytes', 'gauge', "Bytes charged to the home's ledger (sum of logical sizes of its regular files).", s.homes.map((h) => [home(h), h.bytes]));
  family('homesfs_home_inodes', 'gauge', 'Files, directories and symlinks in the home.', s.homes.map((h) => [home(h), h.inodes]));
  family('homesfs_home_budget_bytes', 'gauge', "The home's byte budget (0 = off).", s.homes.map((h) => [home(h), h.budget]));
  family('homesfs_home_inode_cap', 'gauge', "The home's inode cap (0 = off).", s.homes.map((h) => [home(h), h.inodeCap]));
  family('homesfs_home_soft_bytes', 'gauge', "The home's soft byte limit, a warn threshold (0 = off).", s.homes.map((h) => [home(h), h.softBytes]));
  family('homesfs_home_soft_inodes', 'gauge', "The home's soft inode limit, a warn threshold (0 = off).", s.homes.map((h) => [home(h), h.softInodes]));
  family('homesfs_home_over_soft', 'gauge', "1 while the home's bytes or inodes are above a soft limit, else 0.", s.homes.map((h) => [home(h), h.overSoft ? 1 : 0]));
  family('homesfs_homes_over_soft', 'gauge', 'Loaded homes above a soft limit.', [[{}, s.homes.filter((h) => h.overSoft).length]]);
  family('homesfs_home_open_handles', 'gauge', 'Open file handles in the home.', s.homes.map((h) => [home(h), h.openHandles]));
  if (s.openFiles) {
    family('homesfs_open_files', 'gauge', 'Open file handles of all homes (each holds a daemon descriptor).', [[{}, s.openFiles.total]]);
    family('homesfs_open_files_cap', 'gauge', "What all homes' open files may reach together: the daemon's RLIMIT_NOFILE less its reserve and the loaded homes' own descriptors.", [[{}, s.openFiles.cap]]);
  }
  family('homesfs_tenant_bytes', 'gauge', "Bytes of all the tenant's homes.", s.tenants.map((t) => [{ tenant: t.tenant }, t.bytes]));
  family('homesfs_tenant_budget_bytes', 'gauge', "The tenant's total budget across its homes (0 = off).", s.tenants.map((t) => [{ tenant: t.tenant }, t.budget]));
  if (s.ledgerUnderflows !== undefined) {
    family(
      'homesfs_ledger_underflows_total',
      'counter',
      "Counts a home's ledger clamped at 0 since start: each a charge the ledger missed, logged as \"ledger underflow\"; the home counts less than its disk until homesctl rescan. Alert above 0.",
      [[{}, s.ledgerUnderflows]],
    );
  }
  family(
    'homesfs_refusals_total',
    'counter',
    'Policy refusals answered to writers, by home and reason code (see the README errno table).',
    s.refusals.map((r) => [{ home: r.home, code: r.code }, r.count]),
  );
  family('homesfs_fuse_requests_total', 'counter', 'FUSE requests answered in JavaScript, by operation.', s.ops.map((o) => [{ op: o.op }, o.count]));
  family('homesfs_fuse_errors_total', 'counter', 'FUSE requests answered with an error (any errno, ENOENT included), by operation.', s.ops.map((o) => [{ op: o.op }, o.errors]));
  if (s.dataPlane) {
    const n = s.dataPlane;
    family('homesfs_native_reads_total', 'counter', 'FUSE READs answered in the binding, without JavaScript (fuse.nativeRead).', [[{}, n.reads]]);
    family('homesfs_native_read_bytes_total', 'counter', 'Bytes returned by READs answered in the binding.', [[{}, n.bytes]]);
    family('homesfs_native_read_fallbacks_total', 'counter', 'READs of published handles handed to JavaScript (backing error, offset past 2^53).', [[{}, n.fallbacks]]);
    family('homesfs_native_writes_total', 'counter', 'FUSE WRITEs written in the binding (fuse.nativeWrite): decided in JavaScript without their data, or in the binding.', [[{}, n.writes]]);
    family('homesfs_native_write_decisions_total', 'counter', 'Of those, WRITEs whose growth the binding decided from the byte credit the ledger reserved (fuse.nativeWriteDecision).', [[{}, n.decided]]);
    family('homesfs_native_write_decision_fallbacks_total', 'counter', 'WRITEs of files handed to the binding that JavaScript decided after all (credit short, a limit, a size change of its own).', [[{}, n.decisionFallbacks]]);
    family('homesfs_native_write_bytes_total', 'counter', 'Bytes written by WRITEs written in the binding.', [[{}, n.writeBytes]]);
    family('homesfs_native_write_fallbacks_total', 'counter', 'WRITEs of published handles whose data JavaScript asked for after all.', [[{}, n.writeFallbacks]]);
  }
  const h = 'homesfs_fuse_request_duration_seconds';
  out.push(`# HELP ${h} Time from the request reaching JavaScript to its reply, by operation.`, `# TYPE ${h} histogram`);
  for (const o of s.ops) {
    let cumulative = 0;
    for (let i = 0; i < o.buckets.length; i++) {
      cumulative += o.buckets[i]!;
      const le = i < LATENCY_BUCKETS.length ? String(LATENCY_BUCKETS[i]) : '+Inf';
      out.push(`${h}_bucket${labels({ op: o.op, le })} ${cumulative}`);
    }
    out.push(`${h}_sum${labels({ op: o.op })} ${num(o.sumSeconds)}`, `${h}_count${labels({ op: o.op })} ${o.count}`);
  }
  return out.join('\n') + '\n';
}
