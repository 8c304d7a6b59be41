import { readdir } from 'node:fs/promises';
import { ABI } from '../abi.js';
import { BUILD } from '../build-id.js';
import type { Config } from '../config/schema.js';
import type { ReloadResult, StatusReport } from '../control/api.js';
import type { FsContext } from '../fs/context.js';
import type { loadFuse } from '../fuse/binding.js';
import type { NativeFastPath } from '../fuse/fastpath.js';
import type { applyNofile } from '../fuse/limits.js';
import type { MountManager } from '../fuse/mount.js';
import type { ReleaseQueue } from '../fs/native-api.js';
import type { NativeRemovalClaims } from '../fuse/native-claims.js';
import { holderStatus } from '../holder/client.js';
import type { HandoverRaw } from '../fuse/handover-channel.js';
import type { HolderRaw } from '../holder/holder.js';
import { VERSION } from '../version.js';

function fastPathReport(s: ReturnType<NativeFastPath['stats']>) {
  return { answered: s.answered, fallbacks: s.fallbacks, negative: s.negative, dirCacheHits: s.dirCacheHits, dirCacheWalks: s.dirCacheWalks, dirCacheHeld: s.dirCacheHeld, homeAnswered: s.homeAnswered, unlinkAnswered: s.unlinkAnswered, unlinkFallbacks: s.unlinkFallbacks, unlinkSlowFrees: s.unlinkSlowFrees, readdirAnswered: s.readdirAnswered, readdirFallbacks: s.readdirFallbacks, fgetattrAnswered: s.fgetattrAnswered, fgetattrFallbacks: s.fgetattrFallbacks, openAnswered: s.openAnswered, openClosedNatively: s.openClosedNatively, createClosedNatively: s.createClosedNatively, openFallbacks: s.openFallbacks, createAnswered: s.createAnswered, createFallbacks: s.createFallbacks, createSlotAsks: s.settleAsks, mkdirAnswered: s.mkdirAnswered, mkdirFallbacks: s.mkdirFallbacks, symlinkAnswered: s.symlinkAnswered, symlinkFallbacks: s.symlinkFallbacks, linkAnswered: s.linkAnswered, linkFallbacks: s.linkFallbacks, rmdirAnswered: s.rmdirAnswered, rmdirFallbacks: s.rmdirFallbacks, renameAnswered: s.renameAnswered, renameFallbacks: s.renameFallbacks, openSlotsGranted: s.openSlots, utimensAnswered: s.utimensAnswered, chmodAnswered: s.chmodAnswered, chownAnswered: s.chownAnswered, setattrFallbacks: s.setattrFallbacks, writesDecided: s.writesDecided, writeDecisionFallbacks: s.writeDecisionFallbacks, truncatesDecided: s.truncatesDecided, truncateFallbacks: s.truncateFallbacks, homes: s.homes, openInodes: s.inodes, handles: s.handles, inFlight: s.inFlight, retiredHomes: s.retiredHomes };
}

/** What the status report reads: the daemon's parts, and its changing facts through getters. */
export interface StatusSources {
  config: Config;
  started: number;
  Fuse: ReturnType<typeof loadFuse>;
  handover: HandoverRaw & HolderRaw;
  /** systemd's notify socket (its fd store keeps the session), null without */
  sdNotify: string | null;
  ctx: FsContext;
  mount: MountManager;
  backingRoot: string;
  nofile: ReturnType<typeof applyNofile>;
  fastPath: NativeFastPath | null;
  releases: ReleaseQueue | null;
  removals: NativeRemovalClaims;
  /** settles once the homes present at start are loading */
  scans: () => Promise<void>;
  session: () => NonNullable<StatusReport['session']>;
  /** with whom this daemon registered its session (crash survival), false: nobody */
  registered: () => 'holder' | 'systemd' | false;
  configPath: () => string | null;
  lastReload: () => ReloadResult | null;
}

/** The holder of this configuration's session, if one answers. */
async function holderReport(s: StatusSources): Promise<NonNullable<StatusReport['holder']>> {
  const { config } = s;
  // systemd cannot be asked what it stores: what this daemon stored is what it holds.
  if (s.sdNotify !== null) return { crashSurvival: config.crashSurvival, keeper: 'systemd', pid: null, registered: s.registered() === 'systemd' };
  const h = await holderStatus(s.handover, config).catch(() => null);
  return { crashSurvival: config.crashSurvival, keeper: 'holder', pid: h?.holder ?? null, registered: h !== null && h.registered && h.daemonPid === process.pid };
}

/** `status`: the daemon, its session, mount, native layer, homes and limits. */
export async function statusReport(s: StatusSources): Promise<StatusReport> {
  const { config, ctx, mount, Fuse, nofile, fastPath, releases, removals } = s;
  await s.scans().catch(() => undefined);
  const list = await Promise.all(
    ctx.knownHomes().map((p) =>
      p.then(
        (hs) => {
          const snap = hs.scan === 'scanning' ? (hs.scanProgress ?? { bytes: 0, inodes: 0 }) : hs.ledger.snapshot();
          return {
            tenant: hs.backing.ref.tenant,
            key: hs.backing.ref.key,
            scan: hs.scan,
            bytes: snap.bytes,
            inodes: snap.inodes,
            openFiles: ctx.openFilesOf(hs),
            maxOpenFiles: hs.profile.maxOpenFiles,
          };
        },
        () => null,
      ),
    ),
  );
  const sc = mount.selfCheck.report;
  // One descriptor for the listing, from the reserve; null if even that fails.
  const inUse = await readdir('/proc/self/fd').then(
    (l) => l.length - 1,
    () => null,
  );
  return {
    version: VERSION,
    build: BUILD,
    pid: process.pid,
    uptimeSec: Math.round((Date.now() - s.started) / 1000),
    session: s.session(),
    holder: await holderReport(s),
    backing: s.backingRoot,
    configPath: s.configPath(),
    mount: { path: config.mount, ...mount.state },
    native: {
      abi: ABI.VERSION,
      selfCheck: sc.state,
      maxWriteRequest: sc.maxWriteRequest,
      protocol: Fuse.protocol(),
      ...(sc.detail ? { detail: sc.detail } : {}),
      ...(fastPath ? { fastPath: fastPathReport(fastPath.stats()) } : {}),
      ...(releases ? { releasesAnswered: releases.answered() } : {}),
      removals: removals.stats(),
      ...(config.fuse.noFlush ? { noFlush: Fuse.noFlushCount() } : {}),
      ...(Fuse.leadStats().on ? { singleReader: Fuse.leadStats() } : {}),
      invalidations: Fuse.invalidationStats(),
      nodes: Fuse.nodeStats(),
      handles: Fuse.handleStats(),
    },
    homes: list.filter((h): h is NonNullable<typeof h> => h !== null).sort((a, b) => `${a.tenant}/${a.key}`.localeCompare(`${b.tenant}/${b.key}`)),
    lastReload: s.lastReload(),
    limits: {
      nofile: { configured: nofile.configured, soft: nofile.soft, hard: nofile.hard, ...(nofile.warning ? { warning: nofile.warning } : {}) },
      reserveFiles: nofile.reserve,
      openFiles: ctx.openFilesTotal,
      openFilesCap: ctx.openFiles.cap,
      openFilesPerUid: ctx.openFiles.perUidCap,
      dirHandles: { ...Fuse.dirHandleStats(), perUidCap: config.limits.dirHandlesPerUid, cap: config.limits.dirHandles },
      descriptorsInUse: inUse,
    },
    background: {
      slowFrees: { done: ctx.slowFrees.done, inFlight: ctx.slowFrees.inFlight, waiting: ctx.slowFrees.waiting },
      bigListings: { inFlight: ctx.listings.inFlight, waiting: ctx.listings.waiting },
    },
    tenants: ctx
      .knownPools()
      .map((p) => ({ tenant: p.tenant, bytes: p.bytes, budget: p.limit }))
      .sort((a, b) => a.tenant.localeCompare(b.tenant)),
  };
}
