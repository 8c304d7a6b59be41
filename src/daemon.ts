import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { BackingStore } from './backing/store.js';
import * as sys from './backing/sys.js';
import { Cleanup } from './cleanup.js';
import { EXIT } from './cli/exitcodes.js';
import { DAEMON_DIR, stateFileOf, type LoadedConfig } from './config/load.js';
import type { ReloadResult } from './control/api.js';
import type { DaemonCommands } from './control/commands.js';
import { drain } from './daemon/drain.js';
import { SessionRegistration } from './daemon/registration.js';
import { DaemonSockets } from './daemon/sockets.js';
import { DaemonError } from './daemon/error.js';
import { keptSession, takeoverFailed, takeOverSession, takeStoredSession } from './daemon/session.js';
import { statusReport } from './daemon/status.js';
import { FsContext } from './fs/context.js';
import { adoptFs, exportFs } from './fs/handover.js';
import { LedgerArea } from './fs/ledger-area.js';
import { loadFuse, NativeBindingError } from './fuse/binding.js';
import { NativeFastPath } from './fuse/fastpath.js';
import type { HandoverListener } from './fuse/handover-channel.js';
import { applyNofile } from './fuse/limits.js';
import { kernelCache, MountManager, nativeDataPlane, nativeMknod, nativeFallocate, nativeReleases, nativeRenameat2, nativeUtimensat } from './fuse/mount.js';
import { nativeRemovals } from './fuse/native-claims.js';
import { notifySocket } from './holder/fdstore.js';
import { HomeManager } from './homes/manager.js';
import { HomesError } from './errors.js';
import { journalEpoch, journalFds, journalGen } from './journal-fds.js';
import type { Logger } from './log.js';
import { OpMetrics } from './metrics/ops.js';
import { homeId, type HomeRef } from './paths/parse.js';
import { exportDeadHandles, importDeadHandles, resumeSession } from './resume.js';
import { acquireLock, LockHeldError, type HeldLock } from './statefile/lock.js';
import { StateError, StateStore } from './statefile/store.js';
import { adoptLocks, clock, listenForSuccessors, type Received } from './takeover.js';
import { getentLookup, warmedLookup } from './users/hostids.js';
import { UserDb } from './users/userdb.js';

export { VERSION } from './version.js';
export { DaemonError } from './daemon/error.js';

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
  /**
   * Resolves once the frees answered early by a handover are done (the closes
   * go on in this process: takeover.ts); at once when there are none. The
   * process exits after it: its exit would wait for them anyway.
   */
  freesDone(): Promise<void>;
  /** how many of those are not done */
  freesPending(): number;
}

/** Keys that only a restart can change: reloading a config that changes them is refused. */
const RESTART_KEYS = ['backing', 'mount', 'socket', 'platformSocket', 'stateFile', 'adminGroup', 'platformGroup', 'fuse', 'probe', 'owners', 'syncMetadata', 'metrics', 'userdb', 'limits', 'crashSurvival', 'holder'] as const;

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
  /** tell this daemon's supervisor (systemd: MAINPID=) that the successor is the main process now; resolves once told */
  nameSuccessor?: (successorPid: number) => Promise<unknown>;
  /**
   * Homes ("tenant/key") to create once serving when they do not exist, as
   * `homesctl create` makes them (an owner from the pool): the demo's, which
   * their owners must be able to enter.
   */
  ensureHomes?: readonly string[];
}

/**
 * Composition root, in phases: the native binding; where the session comes
 * from (daemon/session.ts: systemd's fd store, the holder, a takeover); the
 * assembly (locks, state file, backing store, fs context, homes, mount);
 * serving (daemon/sockets.ts, crash survival's daemon/registration.ts, the
 * successors' socket); stop, reload and handover. What a phase opens
 * registers its clean-up once on a disposal stack (cleanup.ts), which a
 * failed start and a stop close in reverse order. Nothing below this file
 * knows about process signals or exit codes.
 */
export async function startDaemon(initial: LoadedConfig, log: Logger, readConfig?: () => Promise<LoadedConfig>, opts: StartOptions = {}): Promise<Daemon> {
  const taking: { received: Received | null } = { received: null };
  // What the start opens registers its clean-up here: a failed start closes it (last opened first), and so does stop.
  const cleanup = new Cleanup(log.child({ component: 'cleanup' }));
  try {
    return await start(initial, log, readConfig, opts, taking, cleanup);
  } catch (err) {
    // A successor that fails before it serves tells the serving daemon, which serves on (before its own clean-up: the serving daemon is paused).
    taking.received?.abandon((err as Error).message);
    await cleanup.disposeAll();
    throw err;
  }
}

async function start(initial: LoadedConfig, log: Logger, readConfig: (() => Promise<LoadedConfig>) | undefined, opts: StartOptions, taking: { received: Received | null }, cleanup: Cleanup): Promise<Daemon> {
  let loaded = initial;
  const { config } = initial;
  const started = Date.now();
  logConfigWarnings(log, initial);

  // The one gate on the addon: loadFuse refuses a build whose ABI is not this daemon's.
  let Fuse: ReturnType<typeof loadFuse>;
  try {
    Fuse = loadFuse();
  } catch (err) {
    throw new DaemonError((err as Error).message, err instanceof NativeBindingError ? EXIT.NATIVE : EXIT.INTERNAL);
  }
  // One claim table for the binding's unlinks and ours, whichever of them are on.
  const removals = nativeRemovals(Fuse);
  const dataPlane = nativeDataPlane(Fuse, { read: config.fuse.nativeRead, write: config.fuse.nativeWrite });

  // Before anything spawns a child, which would inherit the descriptors and LISTEN_*.
  const stored = takeStoredSession(Fuse, config, opts.takeover === true);
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

  // Only the backing itself is private: a recursive 0700 would also close the
  // directories above it, the mount point's parent among them in the demo.
  await mkdir(path.dirname(path.resolve(config.backing)), { recursive: true, mode: 0o755 })
    .then(() => mkdir(config.backing, { mode: 0o700 }))
    .catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'EEXIST') return;
      throw new DaemonError(`backing directory ${config.backing}: ${err.message}`, EXIT.BACKING);
    });
  // One daemon per backing tree and per state file: a second one refuses to
  // start before it touches either.
  const stateFile = stateFileOf(config);
  const lockFiles = [path.join(config.backing, DAEMON_DIR, 'lock')];
  if (path.resolve(stateFile) !== path.resolve(config.backing, DAEMON_DIR, 'state.json')) lockFiles.push(`${stateFile}.lock`);
  const locks: HeldLock[] = [];
  // Released last of all (a handover hands them off instead: the list is empty then).
  cleanup.defer('locks', () => {
    for (const l of locks.splice(0)) l.release();
  });

  // The manager needs the fs context and the context needs the manager's policy
  // lookups: the lookups are late-bound through this holder.
  let manager: HomeManager | null = null;
  const ownerOf = (ref: HomeRef) => manager?.core.ownerOf(ref) ?? config.homes[homeId(ref)]?.owner;
  sys.setSyncMetadata(config.syncMetadata);
  // Read only up to the locks (a successor does this while the serving daemon still serves).
  const store = new BackingStore(config.backing, log.child({ component: 'backing' }), ownerOf);
  await store.init().catch((err: Error) => {
    throw new DaemonError(`backing directory ${config.backing}: ${err.message}`, EXIT.BACKING);
  });
  cleanup.defer('backing store', () => store.close());
  const openings = await store.openings();
  if (openings.length > 0) {
    if (!config.allowOpenBacking) {
      throw new DaemonError(
        `the backing tree can be reached without the mount (its homes could be written around every budget): ${openings.join('; ')}. ` +
          `Make the backing root and every tenant directory root-owned 0700 (chown root: DIR && chmod 0700 DIR), or set "allowOpenBacking": true`,
        EXIT.BACKING_OPEN,
      );
    }
    log.warn({ openings }, 'the backing tree can be reached without the mount (allowOpenBacking is set)');
  }
  const hostIds = warmedLookup(getentLookup());

  const handover = Fuse.native;
  const journalRaw = Fuse.native;
  // Where the session comes from (daemon/session.ts): kept through a crash (resumed), the
  // serving daemon's (a successor's takeover), or none (a fresh mount).
  const kept = opts.takeover ? null : await keptSession(stored, handover, config, log);
  const received = opts.takeover ? await takeOverSession(Fuse, handover, loaded, hostIds, stateFile, log) : null;
  taking.received = received;
  const generation = received?.generation ?? (kept ? kept.generation + 1 : 1);
  const startMode: 'fresh' | 'taken over' | 'resumed' = received ? 'taken over' : kept ? 'resumed' : 'fresh';
  let lastHandoverPauseMs: number | null = null;
  try {
    if (received) adoptLocks(received, lockFiles, locks);
    else for (const f of lockFiles) locks.push(acquireLock(f));
  } catch (err) {
    if (received) takeoverFailed((err as Error).message);
    throw new DaemonError((err as Error).message, err instanceof LockHeldError ? EXIT.LOCKED : EXIT.BACKING);
  }
  received?.marks.mark('locksTaken');
  let state: StateStore;
  try {
    state = await StateStore.load(stateFile);
  } catch (err) {
    throw new DaemonError(`state file ${stateFile}: ${(err as Error).message}`, err instanceof StateError ? EXIT.STATE : EXIT.INTERNAL);
  }
  cleanup.defer('state file', () => state.flush());
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

  // The native getattr/lookup fast path: JS publishes, the session's worker threads answer.
  // Directory handles hold no descriptor (listings are streamed): the binding counts them against caps of their own
  // (what libfuse may hold for them), and each as one open file against the open-file caps, beside JS's files.
  Fuse.setDirHandleCaps(config.limits.dirHandlesPerUid, config.limits.dirHandles);
  const dirHandles = { counts: Fuse.dirHandleCounts.bind(Fuse), files: Fuse.setOpenFileCounts.bind(Fuse) };
  const fastPath = config.fuse.nativeFastPath ? new NativeFastPath(Fuse.fastPath, log.child({ component: 'fastpath' }), config.fuse.nativeUnlink, config.fuse.nativeOpen, config.fuse.nativeSetattr, config.fuse.nativeCreate, config.fuse.nativeWrite && config.fuse.nativeWriteDecision, config.fuse.nativeMkdir, config.fuse.nativeRmdir, config.fuse.nativeRename, config.fuse.nativeSymlink, config.fuse.nativeLink, config.fuse.nativeTruncate, !config.allowOpenBacking) : null;
  // RELEASE answered by the binding, carried out here before the next request.
  const releases = config.fuse.nativeRelease ? nativeReleases(Fuse) : null;
  // What the daemon changes behind the kernel's back is told to its caches (entries and attributes kept for long).
  const kernel = kernelCache(Fuse);
  // The ledgers' checkpoints for a crash (fs/ledger-area.ts): the dead daemon's area when resuming (its
  // exact homes start without a scan), else a new one, which the keeper gets with the registration.
  let ledgers: LedgerArea | null = null;
  if (config.crashSurvival || kept) {
    const areaRaw = Fuse.native;
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
    profileFor: (ref) => manager!.core.profileFor(ref),
    tenantBudgetFor: (tenant) => manager!.core.tenantBudgetFor(tenant).bytes,
    utimensat: nativeUtimensat(Fuse),
    mknod: nativeMknod(Fuse),
    fallocate: nativeFallocate(Fuse),
    renameat2: nativeRenameat2(Fuse),
    mountRoot: config.mount,
    openFiles: { perUid: config.limits.openFilesPerUid, forHandles: nofile.forHandles },
    ...(dirHandles ? { dirHandles } : {}),
    dataPlane,
    releases,
    ledgers,
    removals,
    ...(fastPath ? { attrs: fastPath } : {}),
    ...(kernel ? { kernel } : {}),
    ...(config.fuse.passthrough ? { passedThrough: (ino: bigint) => Fuse.passedThrough(ino) } : {}),
  });
  cleanup.defer('homes', () => ctx.close());
  const users = config.userdb.enabled ? new UserDb(config.userdb.dir, config.mount, log.child({ component: 'userdb' })) : null;
  manager = new HomeManager(ctx, state, loaded, log.child({ component: 'homes' }), users, hostIds.lookup);
  const homes = manager;
  await homes.lifecycle.pruneForwards().catch((err: Error) => log.warn({ err: err.message }, 'reserved names not checked'));

  // An owner uid belongs to one home: owners in the state file and the
  // configuration that break that (root, nobody, another home's, a host
  // account) are refused before anything is served.
  const ownerProblems = await homes.owners.ownerProblems().catch((err: Error) => [err.message]);
  if (ownerProblems.length > 0) {
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
        (hs) => homes.core.ownerRecord(ref, hs.backing.owner),
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
      if (received.fs.deadHandles !== undefined) importDeadHandles(Fuse.native, received.fs.deadHandles);
      await mount.adopt(received.session);
    } catch (err) {
      takeoverFailed((err as Error).message);
    }
    received.marks.mark('serving');
    lastHandoverPauseMs = Math.round(clock() - received.pausedAt);
    serving();
    scans = loadHomes();
    await received.ready(lastHandoverPauseMs);
    log.info({ generation, pauseMs: lastHandoverPauseMs, files: r.adopted, refused: r.refused, nodes: Fuse.nodeStats().nodes, steps: received.marks }, 'session taken over');
    void purgeTrash().catch((err: Error) => log.warn({ err: err.message }, 'half-deleted homes not removed'));
  } else if (kept) {
    const k = kept;
    scans = loadHomes();
    try {
      const r = await resumeSession(k, mount, journalRaw);
      if (r.resend !== 0) log.warn({ errno: r.resend === undefined ? null : -r.resend }, 'the kernel refused FUSE_NOTIFY_RESEND (before Linux 6.9): requests the dead daemon had read wait until their callers are interrupted');
      log.info({ generation, epoch: journalEpoch(journalRaw), nodes: Fuse.nodeStats().nodes, keeper: k.keeper, holder: k.holderPid || undefined, journal: r.journal, recoverMs: r.recoverMs, reviveMs: r.reviveMs }, 'session resumed after a crash');
    } catch (err) {
      await scans.catch(() => undefined);
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
      throw new DaemonError((err as Error).message, EXIT.MOUNT);
    }
  }
  // Served from here on: stop unmounts (never before: a kept or a serving daemon's session is not ours to end), then the owner names go.
  cleanup.defer('owner names', () => users?.removeAll());
  cleanup.defer('mount', () => mount.unmount());

  const servingState = () => ({ mounted: mount.state.mounted, loop: mount.state.loop, selfCheck: mount.selfCheck.report.state });

  const status = () =>
    statusReport({
      config,
      started,
      Fuse,
      handover,
      sdNotify,
      ctx,
      mount,
      backingRoot: store.root,
      nofile,
      fastPath,
      releases,
      removals,
      scans: () => scans,
      session: () => ({ generation, startMode, lastHandoverPauseMs }),
      registered: () => registration.registered,
      configPath: () => loaded.path,
      lastReload: () => lastReload,
    });
  const daemonCommands: DaemonCommands = { status, reload };

  // Crash survival's registration (below), made before the sockets serve `status`.
  const registration = new SessionRegistration(handover, config, sdNotify, log);
  const sockets = new DaemonSockets({
    config,
    log,
    homes,
    daemon: daemonCommands,
    ctx,
    kernel,
    opMetrics,
    started,
    servingState,
    // A start that fails after the mount serves: close what is open (mount, homes, state) and say why.
    failed: async (what, err) => {
      await cleanup.disposeAll();
      return new DaemonError(`${what}: ${(err as Error).message}`, EXIT.CONTROL);
    },
  });
  await sockets.start();
  await registration.register({ configPath: loaded.path, generation, resumed: kept !== null, journalRaw, ledgers });
  cleanup.defer('session registration', () => registration.withdraw());
  // First at stop (registered last): no command runs while the rest closes.
  cleanup.defer('control sockets', () => sockets.stop());

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
        const running = sockets.open();
        await sockets.stop();
        await Promise.all(running.map((c) => c.idle()));
        // No registration of ours may reach the holder after the successor's (the holder keeps the latest).
        await registration.link?.pause();
        return async () => {
          registration.link?.resume();
          await sockets.start();
        };
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
      oldestRequestMs: () => mount.session.oldestHeldMs(),
      controlBusy: () => sockets.busy(),
      freesInBackground: (on) => (on ? ctx.slowFrees.letGo() : ctx.slowFrees.awaitAgain()),
      handed: (withNodes) => mount.session.handed(withNodes),
      journalFds: () => journalFds(),
      journalGen: () => journalGen(journalRaw),
      nodeCount: () => Fuse.nodeStats().nodes,
      exportFs: () => {
        // In the pause: the successor counts from the ledgers handed over; a keeper that holds this area
        // until the successor registers its own must not lead a resume to these counts.
        ledgers?.handed();
        const r = exportFs(ctx);
        const dead = exportDeadHandles(Fuse.native);
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
        void registration.link?.stop();
        mount.detach();
      },
      // Done (the process may exit, which closes the handover connection) only once the supervisor
      // knows the successor: the successor notifies systemd only after that close.
      successorNamed: async (successorPid) => {
        try {
          if (successorPid !== undefined && opts.nameSuccessor) await opts.nameSuccessor(successorPid);
        } finally {
          resolveDone(EXIT.OK);
        }
      },
    });
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'no takeover socket: this daemon cannot hand its session over');
  }

  async function shutdown(code: number): Promise<void> {
    if (stopping) return;
    stopping = true;
    successors?.close();
    if (code === EXIT.OK) {
      await drain(config.mount, ctx, loaded.config.shutdownGraceMs, hurry.signal, log).catch((err: Error) => log.error({ err: err.message }, 'shutdown: could not list the homes in use'));
    }
    // The sockets, the registration, the mount, the owner names, the homes, the backing store, the state file, the locks.
    await cleanup.disposeAll();
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
    const missing = homes.limits.missingOverrideProfiles(next);
    if (changed.length || missing.length) {
      return refuse('reload refused: the configuration changes restart-only keys or drops a profile a live override uses; the old one stays', {
        ...(changed.length ? { needsRestart: [...changed] } : {}),
        ...(missing.length ? { overridesWithoutProfile: missing } : {}),
      });
    }
    const ownerIssues = await homes.owners.ownerProblems(next).catch((err: Error) => [err.message]);
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

  for (const home of opts.ensureHomes ?? []) {
    await homes.lifecycle.create({ home }).then(
      () => undefined,
      (err: Error) => {
        if (!(err instanceof HomesError && err.code === 'EXISTS')) log.error({ home, err: err.message }, 'home not created');
      },
    );
  }

  return {
    stop: () => shutdown(EXIT.OK),
    hurry: () => hurry.abort(),
    reload,
    done,
    handedOverTo: () => successor,
    freesDone: () => ctx.slowFrees.finished(),
    freesPending: () => ctx.slowFrees.unfinished,
  };
}
