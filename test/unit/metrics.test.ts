import { describe, expect, it } from 'vitest';
import { labelValue, renderMetrics } from '../../src/metrics/exposition.js';
import { LATENCY_BUCKETS, OpMetrics } from '../../src/metrics/ops.js';
import { RefusalBook } from '../../src/policy/refusals.js';
import { notServingReasons } from '../../src/metrics/health.js';

describe('metrics: per-op histograms', () => {
  it('puts each observation in its bucket and renders cumulative buckets, sum and count', () => {
    let now = 0;
    const m = new OpMetrics(() => now);
    for (const ms of [0.01, 0.2, 0.2, 3, 5000]) {
      const t0 = m.start();
      now += ms;
      m.observe('write', t0, ms > 1000);
    }
    const [w] = m.all();
    expect(w!.count).toBe(5);
    expect(w!.errors).toBe(1);
    expect(w!.buckets.reduce((a, b) => a + b, 0)).toBe(5);
    expect(w!.buckets[w!.buckets.length - 1]).toBe(1); // 5 s: past the last bound, +Inf only
    const text = renderMetrics({ homes: [], tenants: [], refusals: [], ops: m.all(), uptimeSeconds: 1 });
    expect(text).toContain('homesfs_fuse_request_duration_seconds_bucket{op="write",le="0.00005"} 1\n');
    expect(text).toContain('homesfs_fuse_request_duration_seconds_bucket{op="write",le="0.00025"} 3\n');
    expect(text).toContain(`homesfs_fuse_request_duration_seconds_bucket{op="write",le="${LATENCY_BUCKETS.at(-1)}"} 4\n`);
    expect(text).toContain('homesfs_fuse_request_duration_seconds_bucket{op="write",le="+Inf"} 5\n');
    expect(text).toContain('homesfs_fuse_request_duration_seconds_count{op="write"} 5\n');
    expect(text).toContain('homesfs_fuse_errors_total{op="write"} 1\n');
    expect(text).toMatch(/# TYPE homesfs_fuse_request_duration_seconds histogram\n/);
  });

  it('escapes label values (backslash, quote, newline) so a home name cannot forge a line', () => {
    expect(labelValue('a"b\\c\nd')).toBe('a\\"b\\\\c\\nd');
    const text = renderMetrics({
      homes: [{ tenant: 't', key: 'x"}\nhomesfs_up_seconds 9', bytes: 1, inodes: 0, budget: 0, inodeCap: 0, softBytes: 0, softInodes: 0, overSoft: false, openHandles: 0 }],
      tenants: [],
      refusals: [],
      ops: [],
      uptimeSeconds: 1,
    });
    expect(text.split('\n').filter((l) => l.startsWith('homesfs_up_seconds'))).toEqual(['homesfs_up_seconds 1']);
  });

  it("shows all homes' open files against their shared cap", () => {
    const text = renderMetrics({ homes: [], tenants: [], refusals: [], ops: [], uptimeSeconds: 1, openFiles: { total: 12, cap: 63000 } });
    expect(text).toContain('# TYPE homesfs_open_files gauge\nhomesfs_open_files 12\n');
    expect(text).toContain('homesfs_open_files_cap 63000\n');
  });

  it('counts ledger underflows as a counter, and leaves the family out where the snapshot does not say', () => {
    const base = { homes: [], tenants: [], refusals: [], ops: [], uptimeSeconds: 1 };
    expect(renderMetrics({ ...base, ledgerUnderflows: 3 })).toContain('# TYPE homesfs_ledger_underflows_total counter\nhomesfs_ledger_underflows_total 3\n');
    expect(renderMetrics({ ...base, ledgerUnderflows: 0 })).toContain('homesfs_ledger_underflows_total 0\n');
    expect(renderMetrics(base)).not.toContain('homesfs_ledger_underflows_total');
  });
});

describe('metrics: homesfs_mount_up', () => {
  it('is 1 while the mount is served, 0 when not, and absent where the snapshot does not say', () => {
    const base = { homes: [], tenants: [], refusals: [], ops: [], uptimeSeconds: 1 };
    expect(renderMetrics({ ...base, mountUp: true })).toContain('# TYPE homesfs_mount_up gauge\nhomesfs_mount_up 1\n');
    expect(renderMetrics({ ...base, mountUp: false })).toContain('\nhomesfs_mount_up 0\n');
    expect(renderMetrics(base)).not.toContain('homesfs_mount_up');
  });
});

describe('serving state: one rule for status, /healthz and homesfs_mount_up', () => {
  it('serves only when mounted, with the loop running and the self-check not failed', () => {
    expect(notServingReasons({ mounted: true, loop: 'running', selfCheck: 'ok' })).toEqual([]);
    expect(notServingReasons({ mounted: true, loop: 'running', selfCheck: 'pending' })).toEqual([]);
    expect(notServingReasons({ mounted: false, loop: 'starting', selfCheck: 'pending' })).toEqual(['not mounted', 'FUSE loop starting']);
    expect(notServingReasons({ mounted: false, loop: 'ended', selfCheck: 'ok' })).toEqual(['not mounted', 'FUSE loop ended']);
    expect(notServingReasons({ mounted: true, loop: 'running', selfCheck: 'failed' })).toEqual(['native self-check failed']);
  });
});

describe('RefusalBook', () => {
  it('keeps the last N per home, newest first, counts every refusal by code, follows renames and deletes', () => {
    const b = new RefusalBook(3);
    for (let i = 0; i < 5; i++) b.record('t/a', { at: i, op: 'write', path: `f${i}`, code: i % 2 ? 'QUOTA_EXCEEDED' : 'NOT_UTF8', errno: 'EDQUOT', reason: 'r' });
    expect(b.recent('t/a').map((r) => r.path)).toEqual(['f4', 'f3', 'f2']);
    expect(b.counts().sort((x, y) => x.code.localeCompare(y.code))).toEqual([
      { home: 't/a', code: 'NOT_UTF8', count: 3 },
      { home: 't/a', code: 'QUOTA_EXCEEDED', count: 2 },
    ]);
    b.rename('t/a', 't/b');
    expect(b.recent('t/a')).toEqual([]);
    expect(b.recent('t/b')).toHaveLength(3);
    b.forget('t/b');
    expect(b.counts()).toEqual([]);
  });
});
