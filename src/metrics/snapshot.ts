import type { FsContext } from '../fs/context.js';
import type { MetricsSnapshot } from './exposition.js';
import type { OpMetrics } from './ops.js';

/** What a scrape shows: every loaded home's ledger, every tenant pool, refusal counts, op stats. */
export async function metricsSnapshot(ctx: FsContext, ops: OpMetrics, startedMs: number, mountUp?: boolean): Promise<MetricsSnapshot> {
  const homes: MetricsSnapshot['homes'] = [];
  for (const p of ctx.knownHomes()) {
    const hs = await p.catch(() => null);
    if (!hs || hs.scan !== 'done') continue;
    const snap = hs.ledger.snapshot();
    const soft = hs.ledger.soft();
    homes.push({
      tenant: hs.backing.ref.tenant,
      key: hs.backing.ref.key,
      bytes: snap.bytes,
      inodes: snap.inodes,
      budget: snap.limits.maxHomeBytes,
      inodeCap: snap.limits.maxInodes,
      softBytes: soft.bytes.soft,
      softInodes: soft.inodes.soft,
      overSoft: soft.bytes.over || soft.inodes.over,
      openHandles: ctx.openFilesOf(hs),
    });
  }
  homes.sort((a, b) => `${a.tenant}/${a.key}`.localeCompare(`${b.tenant}/${b.key}`));
  return {
    homes,
    tenants: ctx
      .knownPools()
      .map((p) => ({ tenant: p.tenant, bytes: p.bytes, budget: p.limit }))
      .sort((a, b) => a.tenant.localeCompare(b.tenant)),
    refusals: ctx.refusals.counts(),
    ops: ops.all(),
    ...(ctx.dataPlaneStats() ? { dataPlane: ctx.dataPlaneStats()! } : {}),
    uptimeSeconds: Math.round((Date.now() - startedMs) / 1000),
    ...(mountUp !== undefined ? { mountUp } : {}),
    openFiles: { total: ctx.openFilesTotal, cap: ctx.openFiles.cap },
    ledgerUnderflows: ctx.ledgerUnderflows,
  };
}
