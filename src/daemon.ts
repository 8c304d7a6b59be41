import { mkdir } from 'node:fs/promises';
import { BackingStore } from './backing/store.js';
import { EXIT } from './cli/exitcodes.js';
import { DAEMON_DIR, stateFileOf, type LoadedConfig } from './config/load.js';
import path from 'node:path';
import type { DaemonApi, StatusReport } from './control/api.js';
import { commands, PLATFORM_COMMANDS } from './control/registry.js';
import { startControlServer, type ControlServer } from './control/server.js';
import { FsContext } from './fs/context.js';
import * as sys from './backing/sys.js';
import { loadFuse, NativeBindingError } from './fuse/binding.js';
import { MountManager, nativeMknod, nativeUtimensat } from './fuse/mount.js';
import { HomeManager } from './homes/manager.js';
import type { Logger } from './log.js';
import { homeId, type HomeRef } from './paths/parse.js';
import { acquireLock, LockHeldError, type HeldLock } from './state/lock.js';
import { StateError, StateStore } from './state/store.js';
import { VERSION } from './version.js';

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
  stop(): Promise<void>;
  /** re-read the configuration; an invalid one is refused and the old one stays */
  reload(): Promise<boolean>;
  readonly done: Promise<number>;
}

/** Keys that only a restart can change: reloading a config that changes them is refused. */
const RESTART_KEYS = ['backing', 'mount', 'socket', 'platformSocket', 'stateFile', 'adminGroup', 'platformGroup', 'fuse', 'probe', 'owners', 'syncMetadata'] as const;

/**
 * Composition root: config → state → backing store → fs context → homes →
 * mount → control sockets. Nothing below this file knows about process
 * signals or exit codes.
 */
export async function startDaemon(initial: LoadedConfig, log: Logger, readConfig?: () => Promise<LoadedConfig>): Promise<Daemon> {
  let loaded = initial;
  const { config } = initial;
  const started = Date.now();

  let Fuse;
  try {
    Fuse = loadFuse();
  } catch (err) {
    throw new DaemonError((err as Error).message, err instanceof NativeBindingError ? EXIT.NATIVE : EXIT.INTERNAL);
  }

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
  try {
    for (const f of lockFiles) locks.push(acquireLock(f));
  } catch (err) {
    releaseLocks();
    throw new DaemonError((err as Error).message, err instanceof LockHeldError ? EXIT.LOCKED : EXIT.BACKING);
  }
  let state: StateStore;
  try {
    state = await StateStore.load(stateFile);
  } catch (err) {
    releaseLocks();
    throw new DaemonError(`state file ${stateFile}: ${(err as Error).message}`, err instanceof StateError ? EXIT.STATE : EXIT.INTERNAL);
  }

  // The manager needs the fs context and the context needs the manager's policy
  // lookups: the lookups are late-bound through this holder.
  let manager: HomeManager | null = null;
  const ownerOf = (ref: HomeRef) => manager?.ownerOf(ref) ?? config.homes[homeId(ref)]?.owner;
  sys.setSyncMetadata(config.syncMetadata);
  const store = new BackingStore(config.backing, log.child({ component: 'backing' }), ownerOf);
  await store.init().catch((err: Error) => {
    throw new DaemonError(`backing directory ${config.backing}: ${err.message}`, EXIT.BACKING);
  });
  const purged = await store.purgeTrash();
  if (purged) log.info({ purged }, 'removed homes left half-deleted by an earlier run');

  const ctx = new FsContext({
    store,
    log: log.child({ component: 'fs' }),
    profileFor: (ref) => manager!.profileFor(ref),
    utimensat: nativeUtimensat(Fuse),
    mknod: nativeMknod(Fuse),
    mountRoot: config.mount,
  });
  manager = new HomeManager(ctx, state, loaded, log.child({ component: 'homes' }));
  const homes = manager;

  let resolveDone!: (code: number) => void;
  const done = new Promise<number>((r) => (resolveDone = r));
  let stopping = false;

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
  );

  // Ledgers of every home present at start are built in the background; other
  // homes are served meanwhile and a home's mutating ops wait for its scan.
  const scans = store.listAllHomes().then((refs) => {
    for (const ref of refs) void ctx.home(ref).catch((err: Error) => log.warn({ home: homeId(ref), err: err.message }, 'home not served'));
  });

  try {
    await mount.mount();
  } catch (err) {
    await store.close();
    throw new DaemonError((err as Error).message, EXIT.MOUNT);
  }

  const api: DaemonApi = {
    async status(): Promise<StatusReport> {
      await scans.catch(() => undefined);
      const list = await Promise.all(
        ctx.knownHomes().map((p) =>
          p.then(
            (hs) => {
              const snap = hs.scan === 'scanning' ? (hs.scanProgress ?? { bytes: 0, inodes: 0 }) : hs.ledger.snapshot();
              return { tenant: hs.backing.ref.tenant, key: hs.backing.ref.key, scan: hs.scan, bytes: snap.bytes, inodes: snap.inodes };
            },
            () => null,
          ),
        ),
      );
      const sc = mount.selfCheck.report;
      return {
        version: VERSION,
        pid: process.pid,
        uptimeSec: Math.round((Date.now() - started) / 1000),
        backing: store.root,
        configPath: loaded.path,
        mount: { path: config.mount, ...mount.state },
        native: { patch: Fuse.HOMESFS_PATCH ?? 0, selfCheck: sc.state, maxWriteRequest: sc.maxWriteRequest, ...(sc.detail ? { detail: sc.detail } : {}) },
        homes: list.filter((h): h is NonNullable<typeof h> => h !== null).sort((a, b) => `${a.tenant}/${a.key}`.localeCompare(`${b.tenant}/${b.key}`)),
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
    forwards: async () => homes.forwards(),
    releaseName: (args) => homes.releaseName(args),
  };

  const controls: ControlServer[] = [];
  const listeners = [
    { name: 'admin', socketPath: config.socket, group: config.adminGroup },
    { name: 'platform', socketPath: config.platformSocket, group: config.platformGroup, allowed: PLATFORM_COMMANDS },
  ];
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
          log: controlLog.child({ listener: l.name }),
        }),
      );
    }
  } catch (err) {
    for (const c of controls) await c.close().catch(() => undefined);
    await mount.unmount();
    await ctx.close();
    await store.close();
    throw new DaemonError(`control socket: ${(err as Error).message}`, EXIT.CONTROL);
  }

  await mount.runSelfCheck();
  mount.startProbing();
  log.info({ mount: config.mount, backing: store.root, socket: config.socket, platformSocket: config.platformSocket }, 'serving');

  async function shutdown(code: number): Promise<void> {
    if (stopping) return;
    stopping = true;
    for (const c of controls) await c.close().catch(() => undefined);
    await mount.unmount();
    await ctx.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    await state.flush().catch(() => undefined);
    releaseLocks();
    resolveDone(code);
  }

  async function reload(): Promise<boolean> {
    const reloadLog = log.child({ component: 'config' });
    if (!readConfig || loaded.path === null) {
      reloadLog.warn('no configuration file to reload (built-in demo configuration)');
      return false;
    }
    let next: LoadedConfig;
    try {
      next = await readConfig();
    } catch (err) {
      reloadLog.error({ issues: (err as { issues?: string[] }).issues, err: (err as Error).message }, 'reload refused: the configuration is invalid; the old one stays');
      return false;
    }
    const changed = RESTART_KEYS.filter((k) => JSON.stringify(next.config[k]) !== JSON.stringify(loaded.config[k]));
    const missing = homes.missingOverrideProfiles(next);
    if (changed.length || missing.length) {
      reloadLog.error({ needsRestart: changed, overridesWithoutProfile: missing }, 'reload refused; the old configuration stays');
      return false;
    }
    await homes.reload(next);
    loaded = next;
    reloadLog.info({ path: next.path }, 'configuration reloaded');
    return true;
  }

  return { stop: () => shutdown(EXIT.OK), reload, done };
}
