import { mkdir, readdir } from 'node:fs/promises';
import { BackingStore } from './backing/store.js';
import { EXIT } from './cli/exitcodes.js';
import { DAEMON_DIR, stateFileOf, type LoadedConfig } from './config/load.js';
import path from 'node:path';
import type { DaemonApi, ReloadResult, StatusReport } from './control/api.js';
import { HomesError } from './errors.js';
import { holdersUnder, type HomeHolders } from './homes/busy.js';
import { commands, PLATFORM_COMMANDS } from './control/registry.js';
import { startControlServer, type ControlServer } from './control/server.js';
import { FsContext } from './fs/context.js';
import * as sys from './backing/sys.js';
import { ABI } from './abi.js';
import { loadFuse, NativeBindingError } from './fuse/binding.js';
import { applyNofile } from './fuse/limits.js';
import { NativeFastPath, warmProfileMasks } from './fuse/fastpath.js';
import { nativeRemovals, type NativeRemovalClaims } from './fuse/removals.js';
import { kernelCache, MountManager, nativeDataPlane, nativeMknod, nativeFallocate, nativeReleases, nativeUtimensat } from './fuse/mount.js';
import { HomeManager } from './homes/manager.js';
import { renderMetrics } from './metrics/exposition.js';
import { OpMetrics } from './metrics/ops.js';
import { metricsSnapshot } from './metrics/snapshot.js';
import { notServingReasons } from './metrics/health.js';
import { startMetricsServer, type MetricsServer } from './metrics/server.js';
import type { Logger } from './log.js';
import { homeId, type HomeRef } from './paths/parse.js';
import { acquireLock, LockHeldError, type HeldLock } from './state/lock.js';
import { StateError, StateStore } from './state/store.js';
import { BUILD } from './build-id.js';
import { VERSION } from './version.js';
import { getentLookup, warmedLookup } from './users/hostids.js';
import { UserDb } from './users/userdb.js';
import { adoptFs, exportFs, HandedFs, warmHandedFs } from './fs/handover.js';
import type { HandoverRaw } from './fuse/handover-channel.js';
import type { HandoverListener } from './fuse/handover-channel.js';
import { adoptLocks, clock, listenForSuccessors, takeOverFrom, warmOwnerCheck, type Follower, type Received } from './takeover.js';
import { claim, dropKept, holderStatus, register, release, type ClaimResult, type Kept } from './holder/client.js';
import { notifySocket, removeStored, storeRegistration, takeStored, type SdStoreRaw } from './holder/fdstore.js';
import type { HolderRaw } from './holder/holder.js';
import { holderSocket } from './holder/protocol.js';
import { followJournal, journalEpoch, journalFds, journalGen, openJournal, type JournalRaw } from './journal-fds.js';
import { exportDeadHandles, importDeadHandles, resumeSession, type DeadHandlesRaw } from './resume.js';
import { LedgerArea, type LedgerAreaRaw } from './fs/ledger-area.js';

function fastPathReport(s: ReturnType<NativeFastPath['stats']>) {
  return { answered: s.answered, fallbacks: s.fallbacks, negative: s.negative, unlinkAnswered: s.unlinkAnswered, unlinkFallbacks: s.unlinkFallbacks, unlinkSlowFrees: s.unlinkSlowFrees ?? 0, readdirAnswered: s.readdirAnswered, readdirFallbacks: s.readdirFallbacks, fgetattrAnswered: s.fgetattrAnswered, fgetattrFallbacks: s.fgetattrFallbacks, openAnswered: s.openAnswered ?? 0, openClosedNatively: s.openClosedNatively ?? 0, openFallbacks: s.openFallbacks ?? 0, createAnswered: s.createAnswered ?? 0, createFallbacks: s.createFallbacks ?? 0, openSlotsGranted: s.credits ?? 0, utimensAnswered: s.utimensAnswered ?? 0, chmodAnswered: s.chmodAnswered ?? 0, chownAnswered: s.chownAnswered ?? 0, setattrFallbacks: s.setattrFallbacks ?? 0, writesDecided: s.writesDecided ?? 0, writeDecisionFallbacks: s.writeDecisionFallbacks ?? 0, homes: s.homes, openInodes: s.inodes, handles: s.handles, inFlight: s.inFlight ?? 0, retiredHomes: s.retiredHomes ?? 0 };
}

export class DaemonError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

export { VERSION } from './version.js';

export interface Daemon {
  /**
   * Stop serving: wait up to `shutdownGraceMs` for the homes in use (open
   * files, working directories: logged with their pids), then unmount.
   */
  stop(): Promise<void>;
  /** Stop waiting for busy homes (a second SIGTERM): unmount now. */
  hurry(): void;
  /** re-read the configuration; an invalid one is refused and the old one stays */
  reload(): Promise<ReloadResult>;
  readonly done: Promise<number>;
  /** the successor's pid once this daemon handed its session over (done then resolves 0), else null */
  handedOverTo(): number | null;
}

/** Keys that only a restart can change: reloading a config that changes them is refused. */
const RESTART_KEYS = ['backing', 'mount', 'socket', 'platformSocket', 'stateFile', 'adminGroup', 'platformGroup', 'fuse', 'probe', 'owners', 'syncMetadata', 'metrics', 'userdb', 'limits', 'crashSurvival'] as const;

/**
 * Composition root: config → state → backing store → fs context → homes →
 * mount → control sockets. Nothing below this file knows about process
 * signals or exit codes.
 */
/** One line for all of them, at start and after each reload: valid, served, but most likely not meant. */
function logConfigWarnings(log: Logger, loaded: LoadedConfig): void {
  if (loaded.warnings.length === 0) return;
  log
    .child({ component: 'config' })
    .warn({ path: loaded.path, warnings: loaded.warnings }, `configuration warning${loaded.warnings.length > 1 ? 's' : ''}: ${loaded.warnings.map((w) => `${w.path}: ${w.message}`).join('; ')}`);
}

export interface StartOptions {
  /** take the session of the daemon serving this configuration over (takeover.ts) instead of mounting */
  takeover?: boolean;
}

export async function startDaemon(initial: LoadedConfig, log: Logger, readConfig?: () => Promise<LoadedConfig>, opts: StartOptions = {}): Promise<Daemon> {
  const taking: { received: Received | null } = { received: null };
  try {
    return await start(initial, log, readConfig, opts, taking);
  } catch (err) {
    // A successor that fails before it serves tells the serving daemon, which serves on.
    taking.received?.abandon((err as Error).message);
    throw err;
  }
}

async function start(initial: LoadedConfig, log: Logger, readConfig: (() => Promise<LoadedConfig>) | undefined, opts: StartOptions, taking: { received: Received | null }): Promise<Daemon> {
  let loaded = initial;
  const { config } = initial;
  const started = Date.now();
  logConfigWarnings(log, initial);

  let Fuse;
  let dataPlane;
  let removals: NativeRemovalClaims;
  try {
    Fuse = loadFuse();
    // One claim table for the binding's unlinks and ours, whichever of them are on.
    removals = nativeRemovals(Fuse);
    // A build without the data plane is named (exit NATIVE) unless both switches are off.
    dataPlane = nativeDataPlane(Fuse, { read: config.fuse.nativeRead, write: config.fuse.nativeWrite });
  } catch (err) {
    throw new DaemonError((err as Error).message, err instanceof NativeBindingError ? EXIT.NATIVE : EXIT.INTERNAL);
  }

  // What systemd passed back from its fd store (a session kept through a
  // crash): taken before anything spawns a child, which would inherit the
  // descriptors and LISTEN_*. A successor takes the live session instead.
  let stored: ClaimResult;
  try {
    stored = takeStored(Fuse.native as unknown as SdStoreRaw, config);
  } catch (err) {
    stored = { kind: 'refused', reason: (err as Error).message, holderPid: null };
  }
  if (opts.takeover && stored.kind === 'kept') dropKept(stored.kept);
  // Under systemd its fd store keeps the session; a holder process would die with the unit's cgroup.
  const sdNotify = notifySocket();

  // Our descriptors are one table for every home, the sockets and our own
  // work: set its size first, and keep a reserve no home's open files reach.
  const nofile = applyNofile(Fuse, config.limits.nofile, config.limits.reserveFiles);
  if (nofile.warning) log.warn({ nofile }, nofile.warning);
  if (nofile.forHandles < 256) {
    throw new DaemonError(
      `the daemon may hold ${nofile.soft} descriptors: beside limits.reserveFiles (${nofile.reserve}) fewer than 256 remain for open files; raise LimitNOFILE (or limits.nofile) or lower limits.reserveFiles`,
      EXIT.CONFIG,
    );
  }
  log.info({ nofile: nofile.soft, hard: nofile.hard, reserveFiles: nofile.reserve, openFilesPerUid: config.limits.openFilesPerUid }, 'descriptor limits');

  await mkdir(config.backing, { recursive: true, mode: 0o700 }).catch((err: Error) => {
    throw new DaemonError(`backing directory ${config.backing}: ${err.message}`, EXIT.BACKING);
  });
  // One daemon per backing tree and per state file: a second one refuses to
  // start before it touches either.
  const stateFile = stateFileOf(config);
  const lockFiles = [path.join(config.backing, DAEMON_DIR, 'lock')];
  if (path.resolve(stateFile) !== path.resolve(config.backing, DAEMON_DIR, 'state.json')) lockFiles.push(`${stateFile}.lock`);
  const locks: HeldLock[] = [];
  const releaseLocks = () => {
    for (const l of locks.splice(0)) l.release();
  };

  // The manager needs the fs context and the context needs the manager's policy
  // lookups: the lookups are late-bound through this holder.
  let manager: HomeManager | null = null;
  const ownerOf = (ref: HomeRef) => manager?.ownerOf(ref) ?? config.homes[homeId(ref)]?.owner;
  sys.setSyncMetadata(config.syncMetadata);
  // Read only up to the locks (a successor does this while the serving daemon still serves).
  const store = new BackingStore(config.backing, log.child({ component: 'backing' }), ownerOf);
  await store.init().catch((err: Error) => {
    throw new DaemonError(`backing directory ${config.backing}: ${err.message}`, EXIT.BACKING);
  });
  const openings = await store.openings();
  if (openings.length > 0) {
    if (!config.allowOpenBacking) {
      await store.close();
      throw new DaemonError(
        `the backing tree can be reached without the mount (its homes could be written around every budget): ${openings.join('; ')}. ` +
          `Make the backing root and every tenant directory root-owned 0700 (chown root: DIR && chmod 0700 DIR), or set "allowOpenBacking": true`,
        EXIT.BACKING_OPEN,
      );
    }
    log.warn({ openings }, 'the backing tree can be reached without the mount (allowOpenBacking is set)');
  }
  const hostIds = warmedLookup(getentLookup());

  const handover = Fuse.native as unknown as HandoverRaw & HolderRaw & SdStoreRaw;
  const journalRaw = Fuse.native as unknown as JournalRaw;
  // A session a holder kept through the crash of the daemon that served it
  // is resumed, never mounted over (its processes wait in the mount; a stat
  // of the mount point would wait with them). Asked even when crashSurvival
  // is off: an earlier run's holder may keep one. A successor takes the live
  // session instead.
  let kept: Kept | null = null;
  if (!opts.takeover) {
    if (stored.kind === 'refused') {
      await store.close();
      throw new DaemonError(
        `systemd's fd store keeps a session this daemon refuses: ${stored.reason}. It will not mount over it; \`systemctl stop\` the unit to drop the stored session (processes in the mount then get ENOTCONN) and start again`,
        EXIT.HELD,
      );
    }
    const held = stored.kind === 'kept' ? stored : await claim(handover, config).catch((err: Error) => ({ kind: 'refused' as const, reason: err.message, holderPid: null }));
    if (held.kind === 'refused') {
      await store.close();
      throw new DaemonError(`the session holder at ${holderSocket(config)} refused this daemon: ${held.reason}`, EXIT.HELD);
    }
    if (held.kind === 'kept') {
      kept = held.kept;
      log.warn({ keeper: kept.keeper, holder: kept.holderPid || undefined, generation: kept.generation, build: kept.build, journal: kept.journalFds.length }, 'the session of a daemon that died was kept: resuming it');
    }
  }

  // A successor does everything it can before it asks for the session (the
  // serving daemon pauses from then until the successor serves): then it
  // asks, and receives the session, the locks (copies of the serving
  // daemon's descriptors) and the state.
  let received: Received | null = null;
  if (opts.takeover) {
    warmProfileMasks(Object.values(loaded.profiles));
    warmHandedFs();
    await warmOwnerCheck(hostIds, config, stateFile);
    try {
      const tlog = log.child({ component: 'takeover' });
      const follower: Follower = {
        start: (fds) => {
          const r = followJournal(journalRaw, fds);
          if ('gen' in r) return r.gen;
          tlog.warn({ errno: r.errno }, "the serving daemon's journal could not be followed: its node table is handed over");
          return null;
        },
        finish: () => {
          const r = journalRaw.session_journal_follow_finish();
          return r === 0 ? null : `errno ${-r}`;
        },
        drop: () => journalRaw.session_journal_follow_drop(),
      };
      received = await takeOverFrom(
        handover,
        config,
        tlog,
        (v) => HandedFs.parse(v),
        (nodes) => {
          // On failure the session's adopt imports the table itself.
          const res = Fuse.preimportNodes?.(nodes) ?? 0;
          if (res !== 0) tlog.warn({ errno: -res }, 'the node table could not be imported early: imported when the session is adopted');
        },
        follower,
      );
      taking.received = received;
    } catch (err) {
      await store.close();
      throw new DaemonError(`takeover: ${(err as Error).message}`, EXIT.TAKEOVER);
    }
  }
  const takeoverFailed = (why: string): never => {
    throw new DaemonError(`takeover: ${why}; the serving daemon serves on`, EXIT.TAKEOVER);
  };
  const generation = received?.generation ?? (kept ? kept.generation + 1 : 1);
  const startMode: 'fresh' | 'taken over' | 'resumed' = received ? 'taken over' : kept ? 'resumed' : 'fresh';
  let lastHandoverPauseMs: number | null = null;
  try {
    if (received) adoptLocks(received, lockFiles, locks);
    else for (const f of lockFiles) locks.push(acquireLock(f));
  } catch (err) {
    releaseLocks();
    await store.close();
    if (received) takeoverFailed((err as Error).message);
    throw new DaemonError((err as Error).message, err instanceof LockHeldError ? EXIT.LOCKED : EXIT.BACKING);
  }
  received?.marks.mark('locksTaken');
  let state: StateStore;
  try {
    state = await StateStore.load(stateFile);
  } catch (err) {
    releaseLocks();
    await store.close();
    throw new DaemonError(`state file ${stateFile}: ${(err as Error).message}`, err instanceof StateError ? EXIT.STATE : EXIT.INTERNAL);
  }
  received?.marks.mark('stateLoaded');
  const purgeTrash = async () => {
    const { purged, left } = await store.purgeTrash();
    if (purged) log.info({ purged }, 'removed homes left half-deleted by an earlier run');
    for (const t of left) {
      log.warn({ tenant: t.tenant, trash: t.name, err: t.error }, 'could not remove a half-deleted home; it stays (unreachable through the mount) until a later start');
    }
  };
  // Half-deleted homes are unreachable through the mount: a successor removes them once it serves.
  if (!received) await purgeTrash();
  // Files unlinked while open that a session of an earlier run kept: nothing will release them now.
  if (!received && !kept) {
    const { purged, left } = await store.purgeOrphans();
    if (purged) log.info({ purged }, 'removed the orphans of files an earlier session had unlinked while open');
    for (const o of left) log.warn({ home: o.home, orphan: o.name, err: o.error }, 'could not remove an orphan; it stays (unlisted, charged to its home) until a later start');
  }

  // The native getattr/lookup fast path: JS publishes, libfuse's threads answer.
  // Directory handles hold no descriptor (listings are streamed): the binding counts them against caps of their own
  // (what libfuse may hold for them), and each as one open file against the open-file caps, beside JS's files.
  Fuse.setDirHandleCaps?.(config.limits.dirHandlesPerUid, config.limits.dirHandles);
  const dirHandles =
    typeof Fuse.dirHandleCounts === 'function' && typeof Fuse.setOpenFileCounts === 'function'
      ? { counts: Fuse.dirHandleCounts.bind(Fuse), files: Fuse.setOpenFileCounts.bind(Fuse) }
      : undefined;
  const fastPath = config.fuse.nativeFastPath && Fuse.fastPath ? new NativeFastPath(Fuse.fastPath, log.child({ component: 'fastpath' }), config.fuse.nativeUnlink, config.fuse.nativeOpen, config.fuse.nativeSetattr, config.fuse.nativeCreate, config.fuse.nativeWrite && config.fuse.nativeWriteDecision) : null;
  if (config.fuse.nativeFastPath && !fastPath) log.warn('fuse.nativeFastPath is on but the binding has no fast path (rebuild it: node scripts/build-native.mjs): every getattr goes to JS');
  // RELEASE answered by the binding, carried out here before the next request.
  const releases = config.fuse.nativeRelease ? nativeReleases(Fuse) : null;
  if (config.fuse.nativeRelease && !releases) log.warn('fuse.nativeRelease is on but the binding cannot answer RELEASE (rebuild it: node scripts/build-native.mjs): every RELEASE goes to JS');
  // What the daemon changes behind the kernel's back is told to its caches (entries and attributes kept for long).
  const kernel = kernelCache(Fuse);
  // The ledgers' checkpoints for a crash (fs/ledger-area.ts): the dead daemon's area when resuming (its
  // exact homes start without a scan), else a new one, which the keeper gets with the registration.
  let ledgers: LedgerArea | null = null;
  if (config.crashSurvival || kept) {
    const areaRaw = Fuse.native as unknown as LedgerAreaRaw;
    const keptArea = kept?.journalFds[2];
    try {
      ledgers = keptArea !== undefined ? LedgerArea.kept(areaRaw, keptArea) : LedgerArea.create(areaRaw);
      if (ledgers.kept) log.info({ exact: ledgers.kept.exact, scanned: ledgers.kept.scanned }, "the dead daemon's home ledgers: the exact ones are taken without a scan");
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'no ledgers area: after a crash every home is scanned');
    }
  }
  const ctx = new FsContext({
    store,
    log: log.child({ component: 'fs' }),
    profileFor: (ref) => manager!.profileFor(ref),
    tenantBudgetFor: (tenant) => manager!.tenantBudgetFor(tenant).bytes,
    utimensat: nativeUtimensat(Fuse),
    mknod: nativeMknod(Fuse),
    fallocate: nativeFallocate(Fuse),
    mountRoot: config.mount,
    openFiles: { perUid: config.limits.openFilesPerUid, forHandles: nofile.forHandles },
    ...(dirHandles ? { dirHandles } : {}),
    dataPlane,
    releases,
    ledgers,
    removals,
    ...(fastPath ? { attrs: fastPath } : {}),
    ...(kernel ? { kernel } : {}),
  });
  const users = config.userdb.enabled ? new UserDb(config.userdb.dir, config.mount, log.child({ component: 'userdb' })) : null;
  manager = new HomeManager(ctx, state, loaded, log.child({ component: 'homes' }), users, hostIds.lookup);
  const homes = manager;
  await homes.pruneForwards().catch((err: Error) => log.warn({ err: err.message }, 'reserved names not checked'));

  // An owner uid belongs to one home: owners in the state file and the
  // configuration that break that (root, nobody, another home's, a host
  // account) are refused before anything is served.
  const ownerProblems = await homes.ownerProblems().catch((err: Error) => [err.message]);
  if (ownerProblems.length > 0) {
    await ctx.close().catch(() => undefined);
    await store.close();
    releaseLocks();
    throw new DaemonError(
      `owners refused (an owner uid or gid belongs to one home: never 0, 65534, another home's or an account the host knows):\n  ${ownerProblems.join('\n  ')}\n` +
        `Fix the configuration's homes entries or the state file ${stateFile}`,
      EXIT.STATE,
    );
  }

  received?.marks.mark('ownersChecked');
  let resolveDone!: (code: number) => void;
  const done = new Promise<number>((r) => (resolveDone = r));
  let stopping = false;
  /** the pid of the daemon this one handed its session to, once it did */
  let successor: number | null = null;
  let lastReload: ReloadResult | null = null;
  const hurry = new AbortController();

  // Per-operation counting costs a clock read and a few increments per request: only when someone scrapes.
  const opMetrics = config.metrics?.socket !== undefined || config.metrics?.listen !== undefined ? new OpMetrics() : null;
  const mountLog = log.child({ component: 'mount' });
  const mount = new MountManager(
    Fuse,
    ctx,
    config,
    mountLog,
    (why) => {
      mountLog.error({ reason: why }, 'mount lost: exiting');
      void shutdown(EXIT.MOUNT_LOST);
    },
    log.child({ component: 'fuse' }),
    opMetrics,
  );

  // Ledgers of every home present at start are built in the background; other
  // homes are served meanwhile and a home's mutating ops wait for its scan.
  // A successor starts them once it serves (the homes of the files it adopts
  // are opened before, their scans held until then).
  const loadHomes = () => store.listAllHomes().then((refs) => {
    const loading = refs.map((ref) =>
      ctx.home(ref).then(
        (hs) => homes.ownerRecord(ref, hs.backing.owner),
        (err: Error) => {
          log.warn({ home: homeId(ref), err: err.message }, 'home not served');
          return null;
        },
      ),
    );
    // Owner names of every home present, and none left over from an earlier run.
    if (users) {
      void Promise.all(loading)
        .then((records) => users.reconcile(records.filter((r) => r !== null)))
        .catch((err: Error) => log.warn({ err: err.message }, 'owner names not published'));
    }
  });

  let scans: Promise<void>;
  if (received) {
    let serving!: () => void;
    ctx.holdScans(new Promise<void>((r) => (serving = r)));
    // The files first: a request on one may come as soon as the session serves.
    received.marks.mark('contextBuilt');
    const r = await adoptFs(ctx, received.fs, received.fsFds).catch((err: Error) => takeoverFailed(`the open files could not be taken over: ${err.message}`));
    received.marks.mark('filesAdopted');
    try {
      if (received.fs.deadHandles !== undefined) importDeadHandles(Fuse.native as unknown as DeadHandlesRaw, received.fs.deadHandles);
      await mount.adopt(received.session);
    } catch (err) {
      takeoverFailed((err as Error).message);
    }
    received.marks.mark('serving');
    lastHandoverPauseMs = Math.round(clock() - received.pausedAt);
    serving();
    scans = loadHomes();
    await received.ready(lastHandoverPauseMs);
    log.info({ generation, pauseMs: lastHandoverPauseMs, files: r.adopted, refused: r.refused, nodes: Fuse.nodeStats?.().nodes, steps: received.marks }, 'session taken over');
    void purgeTrash().catch((err: Error) => log.warn({ err: err.message }, 'half-deleted homes not removed'));
  } else if (kept) {
    const k = kept;
    scans = loadHomes();
    try {
      const r = await resumeSession(k, mount, journalRaw);
      if (r.resend !== 0) log.warn({ errno: r.resend === undefined ? null : -r.resend }, 'the kernel refused FUSE_NOTIFY_RESEND (before Linux 6.9): requests the dead daemon had read wait until their callers are interrupted');
      log.info({ generation, epoch: journalEpoch(journalRaw), nodes: Fuse.nodeStats?.().nodes, keeper: k.keeper, holder: k.holderPid || undefined, journal: r.journal, recoverMs: r.recoverMs, reviveMs: r.reviveMs }, 'session resumed after a crash');
    } catch (err) {
      await scans.catch(() => undefined);
      await ctx.close().catch(() => undefined);
      await store.close();
      const keeper = k.keeper === 'systemd' ? "systemd's fd store" : `a session holder (pid ${k.holderPid})`;
      const afresh = k.keeper === 'systemd' ? '`systemctl stop` the unit (systemd drops the stored session' : `stop the holder (kill ${k.holderPid}`;
      throw new DaemonError(
        `${keeper} keeps the session of a daemon that died at ${config.mount} (generation ${k.generation}), and this daemon cannot resume it: ${(err as Error).message}. ` +
          `It will not mount over it: processes in the mount wait for that session. To start afresh, ${afresh}; those processes then get ENOTCONN) and start again`,
        EXIT.HELD,
      );
    }
  } else {
    scans = loadHomes();
    try {
      await mount.mount();
    } catch (err) {
      await store.close();
      throw new DaemonError((err as Error).message, EXIT.MOUNT);
    }
  }

  const servingState = () => ({ mounted: mount.state.mounted, loop: mount.state.loop, selfCheck: mount.selfCheck.report.state });

  const served: DaemonApi = {
    async status(): Promise<StatusReport> {
      await scans.catch(() => undefined);
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
        uptimeSec: Math.round((Date.now() - started) / 1000),
        session: { generation, startMode, lastHandoverPauseMs },
        holder: await holderReport(),
        backing: store.root,
        configPath: loaded.path,
        mount: { path: config.mount, ...mount.state },
        native: {
          abi: ABI.VERSION,
          selfCheck: sc.state,
          maxWriteRequest: sc.maxWriteRequest,
          ...(sc.detail ? { detail: sc.detail } : {}),
          ...(fastPath ? { fastPath: fastPathReport(fastPath.stats()) } : {}),
          ...(releases ? { releasesAnswered: releases.answered() } : {}),
          removals: removals.stats(),
          ...(config.fuse.noFlush && typeof Fuse.noFlushCount === 'function' ? { noFlush: Fuse.noFlushCount() } : {}),
          ...(typeof Fuse.leadStats === 'function' && Fuse.leadStats().on ? { singleReader: Fuse.leadStats() } : {}),
          ...(typeof Fuse.invalidationStats === 'function' ? { invalidations: Fuse.invalidationStats() } : {}),
          ...(typeof Fuse.nodeStats === 'function' ? { nodes: Fuse.nodeStats() } : {}),
          ...(typeof Fuse.handleStats === 'function' ? { handles: Fuse.handleStats() } : {}),
        },
        homes: list.filter((h): h is NonNullable<typeof h> => h !== null).sort((a, b) => `${a.tenant}/${a.key}`.localeCompare(`${b.tenant}/${b.key}`)),
        lastReload,
        limits: {
          nofile: { configured: nofile.configured, soft: nofile.soft, hard: nofile.hard, ...(nofile.warning ? { warning: nofile.warning } : {}) },
          reserveFiles: nofile.reserve,
          openFiles: ctx.openFilesTotal,
          openFilesCap: ctx.openFiles.cap,
          openFilesPerUid: ctx.openFiles.perUidCap,
          ...(typeof Fuse.dirHandleStats === 'function'
            ? { dirHandles: { ...Fuse.dirHandleStats(), perUidCap: config.limits.dirHandlesPerUid, cap: config.limits.dirHandles } }
            : {}),
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
    },
    list: (args) => homes.list(args),
    usage: (home) => homes.usage(home),
    create: (args) => homes.create(args),
    setBudget: (args) => homes.setBudget(args),
    setLimits: (args) => homes.setLimits(args),
    setProfile: (args) => homes.setProfile(args),
    settingsGet: (args) => homes.settingsGet(args),
    settingsSet: (args) => homes.settingsSet(args),
    rescan: (args) => homes.rescan(args),
    resolve: (args) => homes.resolve(args),
    renameProject: (args) => homes.renameProject(args),
    renameUser: (args) => homes.renameUser(args),
    deleteProject: (args) => homes.deleteProject(args),
    deleteUser: (args) => homes.deleteUser(args),
    deleteHome: (args) => homes.deleteHome(args),
    deleteTenant: (args) => homes.deleteTenant(args),
    forwards: async () => homes.forwards(),
    releaseName: (args) => homes.releaseName(args),
    async reload() {
      const r = await reload();
      if (!r.ok) {
        const details: Record<string, unknown> = {};
        if (r.issues) details.issues = r.issues;
        if (r.needsRestart) details.needsRestart = r.needsRestart;
        if (r.overridesWithoutProfile) details.overridesWithoutProfile = r.overridesWithoutProfile;
        throw new HomesError('INVALID_ARGUMENT', r.message, details);
      }
      return r;
    },
    tenantUsage: (args) => homes.tenantUsage(args.tenant),
    setTenantBudget: (args) => homes.setTenantBudget(args),
  };
  // Every command sees the handles as the kernel does: RELEASEs the binding
  // answered (and writes it reported) are carried out first, so usage, open
  // counts, BUSY checks and limits never count a file its caller has closed.
  const api = Object.fromEntries(
    Object.entries(served).map(([name, fn]: [string, (...a: unknown[]) => unknown]) => [
      name,
      (...args: unknown[]) => {
        ctx.settle();
        return fn(...args);
      },
    ]),
  ) as unknown as DaemonApi;

  const controls: ControlServer[] = [];
  /** A start that fails after the mount serves: close what is open (sockets, mount, homes, state) and say why. */
  const closeFailedStart = async (what: string, err: unknown): Promise<DaemonError> => {
    for (const c of controls) await c.close().catch(() => undefined);
    await mount.unmount();
    await ctx.close();
    await store.close();
    return new DaemonError(`${what}: ${(err as Error).message}`, EXIT.CONTROL);
  };
  const listeners = [
    { name: 'admin', socketPath: config.socket, group: config.adminGroup },
    { name: 'platform', socketPath: config.platformSocket, group: config.platformGroup, allowed: PLATFORM_COMMANDS },
  ];
  let metricsServer: MetricsServer | null = null;
  /** The control sockets and the metrics endpoint: at start, and again after a handover that did not happen. */
  const startSockets = async (): Promise<void> => {
    try {
      const controlLog = log.child({ component: 'control' });
      for (const l of listeners) {
        controls.push(
          await startControlServer({
            socketPath: l.socketPath,
            // With a group the socket is 0660 (its directory 0750); without, owner only.
            socketMode: l.group === undefined ? 0o600 : 0o660,
            ...(l.group !== undefined ? { socketGroup: l.group } : {}),
            ...(l.allowed ? { allowed: l.allowed } : {}),
            commands,
            api,
            ...(kernel ? { settle: () => kernel.settled() } : {}),
            log: controlLog.child({ listener: l.name }),
          }),
        );
      }
    } catch (err) {
      throw await closeFailedStart('control socket', err);
    }
    if (opMetrics !== null) {
      try {
        metricsServer = await startMetricsServer({
          ...(config.metrics?.socket !== undefined ? { socket: config.metrics.socket } : {}),
          ...(config.metrics?.listen !== undefined ? { listen: config.metrics.listen } : {}),
          ...(config.adminGroup !== undefined ? { group: config.adminGroup } : {}),
          render: async () => {
            ctx.settle();
            return renderMetrics(await metricsSnapshot(ctx, opMetrics, started, notServingReasons(servingState()).length === 0));
          },
          health: () => notServingReasons(servingState()),
          log: log.child({ component: 'metrics' }),
        });
      } catch (err) {
        throw await closeFailedStart('metrics endpoint', err);
      }
    }
  };
  const stopSockets = async (): Promise<void> => {
    for (const c of controls.splice(0)) await c.close().catch(() => undefined);
    await metricsServer?.close().catch(() => undefined);
    metricsServer = null;
  };
  await startSockets();

  // Crash survival: the node table is journaled (a resumed session journals
  // on where its predecessor did) and the holder (under systemd: its fd
  // store) keeps a copy of the session from now on, dropping its copies of
  // the registration before (a predecessor's included). As soon as the session serves and the socket
  // directory exists: a crash before the registration ends the session as
  // before crash survival.
  let registered: 'holder' | 'systemd' | false = false;
  if (config.crashSurvival) {
    const hlog = log.child({ component: 'holder' });
    const session = handover.hs_holder_session();
    try {
      if (session === null) throw new Error('the session has no descriptor or INIT to hand over');
      if (!kept) openJournal(journalRaw);
      const args = { configPath: loaded.path, generation, epoch: journalEpoch(journalRaw), build: BUILD, session, journalFds: [...journalFds(), ...(ledgers ? [ledgers.fd] : [])] };
      if (sdNotify !== null) {
        storeRegistration(handover, sdNotify, config, args);
        registered = 'systemd';
        hlog.info({ notifySocket: sdNotify, generation }, "session stored in systemd's fd store");
      } else {
        await register(handover, config, args, hlog);
        registered = 'holder';
        hlog.info({ socket: holderSocket(config), generation }, 'session registered with the holder');
      }
    } catch (err) {
      hlog.error({ err: (err as Error).message }, 'the session is not registered with a holder or systemd\'s fd store: a crash of this daemon ends it');
    }
  }

  await mount.runSelfCheck();
  mount.startProbing();
  log.info({ mount: config.mount, backing: store.root, socket: config.socket, platformSocket: config.platformSocket, generation, startMode }, 'serving');


  // A successor (`homesfs serve --takeover`) may ask for the session from now on.
  let successors: HandoverListener | null = null;
  try {
    successors = listenForSuccessors(handover, {
      config,
      generation,
      log: log.child({ component: 'takeover' }),
      quiesceControl: async () => {
        // Closed first, then the commands already running awaited: waiting first would let
        // a command start between the wait and the close, and run on after the handover.
        const running = [...controls];
        await stopSockets();
        await Promise.all(running.map((c) => c.idle()));
        return () => startSockets();
      },
      pause: () => mount.session.pause(),
      paused: () => {
        // Everything the binding queued for JavaScript is taken while the workers park.
        ctx.settle();
        return mount.session.paused();
      },
      resume: () => {
        ledgers?.live();
        mount.session.resume();
      },
      handed: (withNodes) => mount.session.handed(withNodes),
      journalFds: () => journalFds(),
      journalGen: () => journalGen(journalRaw),
      nodeCount: () => Fuse.nodeStats?.().nodes ?? null,
      exportFs: () => {
        // In the pause: the successor counts from the ledgers handed over; a keeper that holds this area
        // until the successor registers its own must not lead a resume to these counts.
        ledgers?.handed();
        const r = exportFs(ctx);
        const dead = exportDeadHandles(Fuse.native as unknown as DeadHandlesRaw);
        return dead === undefined ? r : { ...r, state: { ...r.state, deadHandles: dead } };
      },
      flushState: () => state.flush(),
      locks: () => locks.map((l) => ({ file: l.file, fd: l.fd })),
      handedOver: (pauseMs, successorPid) => {
        lastHandoverPauseMs = pauseMs;
        if (successorPid !== undefined && Number.isSafeInteger(successorPid) && successorPid > 0) successor = successorPid;
        // The successor holds the locks through its copies: ours close, the files stay as it wrote them.
        for (const l of locks.splice(0)) l.handOff();
        stopping = true;
        successors?.close();
        mount.detach();
        resolveDone(EXIT.OK);
      },
    });
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'no takeover socket: this daemon cannot hand its session over');
  }

  /** The holder of this configuration's session, if one answers. */
  async function holderReport(): Promise<NonNullable<StatusReport['holder']>> {
    // systemd cannot be asked what it stores: what this daemon stored is what it holds.
    if (sdNotify !== null) return { crashSurvival: config.crashSurvival, keeper: 'systemd', pid: null, registered: registered === 'systemd' };
    const h = await holderStatus(handover, config).catch(() => null);
    return { crashSurvival: config.crashSurvival, keeper: 'holder', pid: h?.holder ?? null, registered: h !== null && h.registered && h.daemonPid === process.pid };
  }

  /** Homes with open handles (any pid namespace) or visible holders (pids from /proc). */
  async function busyHomes(): Promise<Map<string, HomeHolders & { openFiles: number }>> {
    const out = new Map<string, HomeHolders & { openFiles: number }>();
    for (const [home, h] of await holdersUnder(config.mount)) out.set(home, { ...h, openFiles: 0 });
    const states = await Promise.all(ctx.knownHomes().map((p) => p.catch(() => null)));
    for (const hs of states) {
      if (!hs || ctx.openFilesOf(hs) === 0) continue;
      const id = homeId(hs.backing.ref);
      const h = out.get(id) ?? { cwdPids: [], filePids: [], openFiles: 0 };
      h.openFiles = ctx.openFilesOf(hs);
      out.set(id, h);
    }
    return out;
  }

  /**
   * Before unmounting on SIGTERM: say which homes are in use and by whom, and
   * give their processes `shutdownGraceMs` to finish. Whatever still holds a
   * file or a working directory afterwards gets ENOTCONN from then on.
   */
  async function drain(): Promise<void> {
    const stopLog = log.child({ component: 'shutdown' });
    const graceMs = loaded.config.shutdownGraceMs;
    const deadline = Date.now() + graceMs;
    let announced = false;
    for (;;) {
      const busy = await busyHomes();
      if (busy.size === 0) {
        if (announced) stopLog.info('every home was released: unmounting');
        return;
      }
      if (!announced) {
        announced = true;
        for (const [home, h] of busy) stopLog.warn({ home, openFiles: h.openFiles, filePids: h.filePids, cwdPids: h.cwdPids }, 'home in use at shutdown');
        stopLog.warn({ homes: busy.size, graceMs }, 'waiting for the homes in use before unmounting (a second SIGTERM unmounts at once)');
      }
      if (Date.now() >= deadline || hurry.signal.aborted) {
        stopLog.warn(
          { homes: [...busy.keys()], pids: [...new Set([...busy.values()].flatMap((h) => [...h.filePids, ...h.cwdPids]))].sort((a, b) => a - b) },
          'unmounting with homes still in use: their processes get ENOTCONN and must be restarted',
        );
        return;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(250, Math.max(0, deadline - Date.now())));
        hurry.signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
  }

  async function shutdown(code: number): Promise<void> {
    if (stopping) return;
    stopping = true;
    successors?.close();
    if (code === EXIT.OK) await drain().catch((err: Error) => log.error({ err: err.message }, 'shutdown: could not list the homes in use'));
    await stopSockets();
    // A plain stop leaves no holder behind (a handover never comes here: its successor registers instead).
    if (registered === 'holder') await release(handover, config).catch((err: Error) => log.warn({ err: err.message }, 'the session holder could not be released'));
    if (registered === 'systemd' && sdNotify !== null) {
      try {
        removeStored(handover, sdNotify);
      } catch (err) {
        log.warn({ err: (err as Error).message }, "the session could not be removed from systemd's fd store");
      }
    }
    await mount.unmount();
    await users?.removeAll().catch(() => undefined);
    await ctx.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    await state.flush().catch(() => undefined);
    releaseLocks();
    resolveDone(code);
  }

  async function reload(): Promise<ReloadResult> {
    const reloadLog = log.child({ component: 'config' });
    const at = new Date().toISOString();
    const refuse = (message: string, extra: Partial<ReloadResult>, fields: Record<string, unknown> = {}): ReloadResult => {
      reloadLog.error({ ...fields, ...extra }, message);
      return (lastReload = { at, ok: false, message, ...extra });
    };
    if (!readConfig || loaded.path === null) {
      return refuse('reload refused: no configuration file to re-read (started with --demo or flags only)', {});
    }
    let next: LoadedConfig;
    try {
      next = await readConfig();
    } catch (err) {
      const issues = (err as { issues?: string[] }).issues ?? [(err as Error).message];
      const what = (err as { kind?: string }).kind === 'unreadable' ? 'the configuration file cannot be read' : 'the configuration is invalid';
      return refuse(`reload refused: ${what}; the old one stays`, { issues });
    }
    const changed = RESTART_KEYS.filter((k) => JSON.stringify(next.config[k]) !== JSON.stringify(loaded.config[k]));
    const missing = homes.missingOverrideProfiles(next);
    if (changed.length || missing.length) {
      return refuse('reload refused: the configuration changes restart-only keys or drops a profile a live override uses; the old one stays', {
        ...(changed.length ? { needsRestart: [...changed] } : {}),
        ...(missing.length ? { overridesWithoutProfile: missing } : {}),
      });
    }
    const ownerIssues = await homes.ownerProblems(next).catch((err: Error) => [err.message]);
    if (ownerIssues.length) return refuse('reload refused: the configuration gives homes owners that are refused; the old one stays', { issues: ownerIssues });
    const applied = (Object.keys({ ...next.config, ...loaded.config }) as Array<keyof typeof next.config>).filter(
      (k) => JSON.stringify(next.config[k]) !== JSON.stringify(loaded.config[k]),
    );
    await homes.reload(next);
    loaded = next;
    // Logged before a new logLevel applies, so it shows even when that level hides info.
    reloadLog.info({ path: next.path, applied }, 'configuration reloaded');
    logConfigWarnings(log, next);
    // pino children share the root's level unless they set their own (ours never do)
    log.level = next.config.logLevel;
    return (lastReload = { at, ok: true, message: applied.length ? `applied: ${applied.join(', ')}` : 'no changes', applied });
  }

  return {
    stop: () => shutdown(EXIT.OK),
    hurry: () => hurry.abort(),
    reload,
    done,
    handedOverTo: () => successor,
  };
}
