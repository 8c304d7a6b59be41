import type { PassthroughInfo } from '../addon-raw.js';
import type { ExecPolicy } from '../exec/policy.js';

/**
 * The replies of the control socket's commands (commands.ts maps each command
 * to the function that returns one of these).
 */

/** The outcome of a reload (SIGHUP or `reload`), also shown by `status` as the last one. */
export interface ReloadResult {
  /** ISO 8601 */
  at: string;
  ok: boolean;
  message: string;
  /** top-level keys whose value changed and now apply */
  applied?: string[];
  /** restart-only keys the new file changes (refused) */
  needsRestart?: string[];
  /** what is wrong with the new file (refused) */
  issues?: string[];
  /** profiles a live override uses that the new file drops (refused) */
  overridesWithoutProfile?: string[];
}

export interface TenantUsage {
  tenant: string;
  /** the sum of the bytes of the tenant's homes */
  bytes: number;
  /** effective total budget, 0 = off */
  budget: number;
  /** where the budget comes from: a live override, the config's `tenants.<t>.maxBytes`, or none */
  budgetSource: 'override' | 'config' | 'off';
  homes: Array<{ key: string; bytes: number }>;
}

/** A renamed home's old name, reserved: resolve answers RENAMED with `to`. */
export interface Forward {
  /** "tenant/key" of the old name */
  from: string;
  /** "tenant/key" the home moved to */
  to: string;
  /** ISO 8601 time of the rename */
  at: string;
}

/** Where a limit in force comes from: a live override (state file) or the home's profile (see profileSource). */
export type LimitSource = 'override' | 'profile';

/**
 * Trouble worth a glance, as `list` shows it: OVER (usage above the byte budget
 * or inodes above the cap), SOFT (above a soft limit, not OVER), ORPHAN (a project home its project no longer
 * resolves to), SCANNING (the ledger is being built), SCAN_FAILED, BUSY (open
 * files or working directories inside: rename and delete need --force).
 */
export type HomeFlag = 'OVER' | 'SOFT' | 'ORPHAN' | 'SCANNING' | 'SCAN_FAILED' | 'BUSY';

/**
 * The home's soft limits (warn thresholds; nothing is refused at them): each
 * in force (0 = off; never above its hard limit), where it comes from, what
 * the profile alone gives, and whether usage is above it now.
 */
export interface HomeSoftLimits {
  bytes: number;
  inodes: number;
  overBytes: boolean;
  overInodes: boolean;
  sources: { bytes: LimitSource; inodes: LimitSource };
  profile: { bytes: number; inodes: number };
}

/** "tenant/key" */
export type HomeRefArg = string;
export type HomeScopeValue = 'project' | 'tenant' | 'user';

export interface OwnerArg {
  uid: number;
  gid: number;
}

export interface HomeInfo {
  tenant: string;
  key: string;
  scope: HomeScopeValue;
  /** the absolute path of the home under the mount */
  path: string;
  owner: OwnerArg;
  profile: string;
  profileSource: 'override' | 'home' | 'tenant' | 'default';
  bytes: number;
  /** effective byte budget, 0 = off */
  budget: number;
  /** per-file cap in bytes, 0 = off */
  fileCap: number;
  inodes: number;
  /** 0 = off */
  inodeCap: number;
  /** bytes / budget in percent (one decimal), null without a budget */
  percent: number | null;
  /** where each limit in force comes from */
  limitSources: { budget: LimitSource; inodeCap: LimitSource; fileCap: LimitSource };
  /** what the profile alone would give (what `default` goes back to) */
  profileLimits: { budget: number; inodeCap: number; fileCap: number };
  soft: HomeSoftLimits;
  openHandles: number;
  /** the profile's cap on open files (0 = off) */
  maxOpenFiles?: number;
  /** processes whose working directory is inside the home */
  cwdProcesses: number;
  /** the home's tenant: total bytes across its homes and its total budget (0 = off) */
  tenantBytes: number;
  tenantBudget: number;
  scan: 'pending' | 'scanning' | 'done' | 'failed';
  /** a project home whose project now resolves to a shared scope (left by a home-scope change) */
  orphan: boolean;
  flags: HomeFlag[];
}

export interface SettingsTarget {
  tenant: string;
  project?: string;
  user?: string;
}

export interface SettingsView {
  tenant: string;
  /** the raw values stored at each level (null = not set) */
  tenantDefault: string | null;
  project?: { name: string; value: string | null };
  user?: { login: string; value: string | null };
  /** present when a project is given: what resolve would answer */
  resolved?: { scope: HomeScopeValue; source: 'user' | 'project' | 'tenant' | 'default'; key: string };
  /**
   * Present when a project is given: the levels resolve consults, in order
   * (user only when a user is given), with the raw value stored at each; the
   * first level with a value decides ('default' decides when none has one).
   */
  cascade?: Array<{ level: 'user' | 'project' | 'tenant' | 'default'; value: string | null; decides: boolean }>;
  /** settings-set: homes the change leaves unused (already applied, or with dryRun only previewed) */
  orphaned?: Array<{ home: string; bytes: number }>;
  /** settings-set with dryRun: nothing was changed */
  dryRun?: boolean;
}

export interface RescanResult {
  home: string;
  before: { bytes: number; inodes: number };
  after: { bytes: number; inodes: number };
  drift: { bytes: number; inodes: number };
  /** backing nodes put back to the owner (and owner-only modes) the profile presents; absent where the profile shows real ownership */
  repaired?: { owners: number; modes: number };
}

export interface ResolveResult {
  tenant: string;
  scope: HomeScopeValue;
  key: string;
  /** HOME for the subprocess: the home's path under the mount */
  home: string;
  owner: OwnerArg;
  created: boolean;
  source: 'user' | 'project' | 'tenant' | 'default';
  /** the owner's user name (published for NSS when the daemon's userdb is on) */
  userName?: string;
  /** the sealed-environment policy of the daemon's configuration, for exec callers */
  exec?: ExecPolicy;
}

export interface RenameResult {
  from: string;
  to: string;
  /** what was in use when --force went ahead anyway */
  openFiles: number;
  cwdProcesses: number;
}

/** A process as replies name it (busy refusals, deletes). */
export interface ProcessInfo {
  pid: number;
  /** its real uid */
  uid: number;
  /** the kernel's short name */
  comm: string;
  /** its command line (cut at 200 characters), or "[comm]" where it has none */
  command: string;
}

/** A process that keeps a home busy: a working directory inside, descriptors open inside. */
export interface HolderInfo extends ProcessInfo {
  cwd: boolean;
  openFiles: number;
}

/** `details` of a BUSY refusal of a rename or delete. */
export interface BusyDetails {
  openFiles: number;
  cwdProcesses: number;
  /** the visible processes holding the home (at most 50; other pid namespaces are not seen) */
  processes: HolderInfo[];
}

export interface DeleteTenantResult {
  tenant: string;
  /** its backing directory was there and is removed */
  removedDir: boolean;
  /** what the state file kept for it and no longer does */
  dropped: { settings: boolean; budget: boolean; forwards: string[] };
}

export interface DeleteResult {
  /** "tenant/key" of the deleted home, null when nothing was deleted */
  deleted: string | null;
  /** why nothing was deleted (the home is shared under tenant/user scope) */
  deleteNote?: string;
  bytes?: number;
  /** the deleted home's owner uid: retired, never handed out again */
  ownerUid?: number;
  /** processes still running as that uid when the home was gone (they keep running; the uid owns nothing in the mount any more) */
  ownerProcesses?: ProcessInfo[];
  /** old names that forwarded to the deleted home: released with it (no forward points at a home that is gone) */
  releasedNames?: string[];
}

export interface StatusReport {
  version: string;
  /** the code this daemon loaded (src/build-id.ts): `homesfs reload` compares it with the installed code's */
  build: string;
  pid: number;
  uptimeSec: number;
  /**
   * The FUSE session: its generation (1 when this daemon mounted; one more at
   * each live upgrade), how this daemon came to serve it, and how long the
   * last handover paused the mount (this daemon's own, or the one it took
   * the session from; null before any).
   */
  session?: { generation: number; startMode: 'fresh' | 'taken over' | 'resumed'; lastHandoverPauseMs: number | null };
  /**
   * Crash survival (src/holder/): whether the configuration asks for it, who
   * keeps the session (systemd's fd store under a Type=notify unit, else the
   * holder process), the pid of the holder answering on this configuration's
   * holder socket (null: none, always so with systemd), and whether this
   * daemon's session is the one kept.
   */
  holder?: { crashSurvival: boolean; keeper?: 'holder' | 'systemd'; pid: number | null; registered: boolean };
  backing: string;
  configPath: string | null;
  mount: {
    path: string;
    /** True only after the kernel's INIT and while the mount really answers. */
    mounted: boolean;
    loop: 'starting' | 'running' | 'ended';
    /** ISO 8601 time of the last liveness probe. */
    lastProbeAt: string | null;
    lastProbeOk: boolean | null;
    lastProbeError?: string;
  };
  native: {
    /** the native ABI version the daemon and its addon share (native/src/abi.h) */
    abi: number;
    selfCheck: 'pending' | 'ok' | 'failed';
    maxWriteRequest: number | null;
    /** what INIT settled with the kernel (session/proto.c): protocol 7.<minor>, the largest WRITE and request in pages, the INIT flags; and the largest READ and WRITE, and how many LOOKUPs, READDIRPLUSes and READs, the kernel has sent since; passthrough opens */
    protocol: { minor: number; kernelMinor: number; maxWrite: number; maxPages: number; flags: number; largestRead: number; largestWrite: number; lookups: number; readdirplus: number; reads: number; ioUringOffered: boolean; passthrough: PassthroughInfo };
    detail?: string;
    /** the native getattr/lookup fast path (absent when fuse.nativeFastPath is off): requests answered natively and handed to JS; inFlight: native operations holding a home now; retiredHomes: homes withdrawn or replaced that one still holds */
    fastPath?: { answered: number; fallbacks: number; negative: number; dirCacheHits?: number; dirCacheWalks?: number; dirCacheHeld?: number; homeAnswered: number; unlinkAnswered: number; unlinkFallbacks: number; unlinkSlowFrees: number; readdirAnswered: number; readdirFallbacks: number; fgetattrAnswered: number; fgetattrFallbacks: number; openAnswered: number; openClosedNatively: number; createClosedNatively: number; openFallbacks: number; createAnswered: number; createFallbacks: number; createSlotAsks: number; mkdirAnswered: number; mkdirFallbacks: number; symlinkAnswered: number; symlinkFallbacks: number; linkAnswered: number; linkFallbacks: number; rmdirAnswered: number; rmdirFallbacks: number; renameAnswered: number; renameFallbacks: number; openSlotsGranted: number; utimensAnswered: number; chmodAnswered: number; chownAnswered: number; setattrFallbacks: number; writesDecided: number; writeDecisionFallbacks: number; truncatesDecided: number; truncateFallbacks: number; homes: number; openInodes: number; handles: number; inFlight: number; retiredHomes: number };
    /** RELEASEs the binding answered and this daemon carried out later (absent when fuse.nativeRelease is off) */
    releasesAnswered?: number;
    /** the one claim table of removals (native/src/fastpath/claims.c): inodes whose names are being removed, and removers that found the last name gone after another had given its bytes back */
    removals?: { inFlight: number; raced: number };
    /** opens answered with FOPEN_NOFLUSH (their closes send no FLUSH), and the FLUSH requests that came (absent when fuse.noFlush is off) */
    noFlush?: { opens: number; flushes: number };
    /** one reader of the device at a time (absent when fuse.singleReader is off): the lead handed over before a thread blocked, and taken away by the watchdog from a thread held up 4 ms by one request; readWaits: the handovers before a read the page cache could not serve */
    singleReader?: { on: boolean; handoffs: number; revocations: number; readWaits: number };
    /** the kernel's caches told what the daemon changed behind them (native/src/session/inval.c): notifications queued, sent (the kernel dropped something), not cached (it had nothing), failed, still pending */
    invalidations?: { queued: number; sent: number; notCached: number; failed: number; pending: number };
    /** the session's node table (native/src/session/nodes.c): nodes the kernel may name by ID (the root included), of them reachable by inode number; a live upgrade carries them over */
    nodes?: { nodes: number; byInode: number };
    /** file handles across daemons (native/src/session/handles.c): the epoch this daemon's handles carry; since it started, requests the kernel sent again after a crash (FUSE_NOTIFY_RESEND), of them answered EIO (their effect could not be known), and a dead daemon's handles reopened on first use */
    handles?: { epoch: number; resent: number; refused: number; reopened: number };
  };
  homes: Array<{
    tenant: string;
    key: string;
    scan: 'pending' | 'scanning' | 'done' | 'failed';
    bytes?: number;
    inodes?: number;
    /** files open in the home now (and opens in flight), against its profile's maxOpenFiles (0 = off) */
    openFiles?: number;
    maxOpenFiles?: number;
  }>;
  /**
   * The daemon's descriptors: RLIMIT_NOFILE in force (`configured`: limits.nofile,
   * null = the hard limit), the reserve, the open files of all homes against
   * their shared cap (limit − reserve − one descriptor per loaded home), the
   * per-uid cap, and the descriptors the process holds right now.
   */
  limits?: {
    nofile: { configured: number | null; soft: number; hard: number; warning?: string };
    reserveFiles: number;
    openFiles: number;
    openFilesCap: number;
    openFilesPerUid: number;
    /** open directory handles (the binding counts them: they hold no descriptor) and OPENDIRs refused with EMFILE; the caps, 0 = off */
    dirHandles?: { open: number; refused: number; perUidCap: number; cap: number };
    descriptorsInUse: number | null;
  };
  /** the last reload since start (SIGHUP or `reload`), null if none */
  lastReload?: ReloadResult | null;
  /** every tenant with a loaded home: total bytes and total budget (0 = off) */
  tenants?: Array<{ tenant: string; bytes: number; budget: number }>;
  /**
   * Work that takes turns per home off the JavaScript thread: closes that free a
   * big file's blocks (done since start, running, waiting) and listings of big
   * directories JavaScript streams (running, waiting).
   */
  background?: { slowFrees: { done: number; inFlight: number; waiting: number }; bigListings: { inFlight: number; waiting: number } };
}
