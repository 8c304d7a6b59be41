import { z } from 'zod';
import { DEFAULT_EXEC_POLICY, ExecPolicySchema } from '../exec/policy.js';
import { ConfigProfileSchema, ProfileNameSchema } from '../policy/profiles.js';
import { byteSizeSchema } from '../policy/size.js';

const Owner = z.object({ uid: z.number().int().min(0).max(0xfffffffe), gid: z.number().int().min(0).max(0xfffffffe) }).strict();

const HomeEntry = z
  .object({
    owner: Owner.optional(),
    profile: z.string().min(1).optional(),
  })
  .strict();

const TenantEntry = z
  .object({
    defaultProfile: z.string().min(1).optional(),
    /** total byte budget across the tenant's homes, 0 = off */
    maxBytes: byteSizeSchema(z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)).optional(),
  })
  .strict();

const FuseOptions = z
  .object({
    /**
     * seconds the kernel may cache attributes and names; 0 = ask every time.
     * Long: the daemon is the only writer of the backing tree and tells the
     * kernel what it changes behind its back (session/inval.c)
     */
    attrTimeout: z.number().min(0).max(3600).default(300),
    entryTimeout: z.number().min(0).max(3600).default(300),
    negativeTimeout: z.number().min(0).max(3600).default(0),
    /** the largest WRITE asked of the kernel at INIT; 1 MiB (256 pages) is the kernel's cap (session/proto.h) */
    maxWrite: byteSizeSchema(z.number().int().min(4096).max(1048576)).default(1048576),
    kernelCache: z.boolean().default(false),
    /**
     * listings answer each entry's attributes and node with its name (READDIRPLUS, asked at
     * INIT), from the fast path's answers: `ls -l` and `find -printf` need no LOOKUP per name
     */
    readdirplus: z.boolean().default(true),
    /**
     * read-only opens of files whose reads need no policy (content: binary) are passed through
     * (FUSE_PASSTHROUGH, Linux 6.9+): the kernel reads the backing file itself. Needs
     * nativeRead and nativeWrite (session/nodes.h: the family of opens of one file)
     */
    passthrough: z.boolean().default(true),
    /** READs of handles whose reads need no policy answered in the binding (pread on a session worker thread) */
    nativeRead: z.boolean().default(true),
    /** WRITEs of binary-content handles decided in JS without their data, written in the binding */
    nativeWrite: z.boolean().default(true),
    /**
     * getattr/lookup answered on the session's worker threads from state the daemon
     * publishes (native/src/fastpath/fastpath_*.c); anything it is unsure of still goes to JS
     */
    nativeFastPath: z.boolean().default(true),
    /**
     * with the fast path: unlinks of files not open in JS done on the session's
     * worker threads in homes whose ledger is built and whose tenant has no budget;
     * what leaves the home reaches the ledger before its next answer
     */
    nativeUnlink: z.boolean().default(true),
    /**
     * with the fast path: read-only opens of regular files by a home's owner,
     * in homes whose content needs no read policy, answered on the session's
     * worker threads with open-file slots the daemon granted beforehand
     */
    nativeOpen: z.boolean().default(true),
    /**
     * with native opens: new files of binary homes made on the session's
     * worker threads (owned as JS owns them: the home's owner, or the caller under
     * chown: allow), with an open-file slot and an inode the daemon reserved
     * beforehand
     */
    nativeCreate: z.boolean().default(true),
    /**
     * with native creates: new directories of homes where creates are native
     * made on the session's worker threads too (mode and owner as JS gives
     * them), each with the inode of a create slot
     */
    nativeMkdir: z.boolean().default(true),
    /**
     * with native creates: new symlinks of homes where creates are native made on
     * the session's worker threads too (an absolute target, or a profile that
     * denies links, still JS's), each with the inode of a create slot
     */
    nativeSymlink: z.boolean().default(true),
    /**
     * with native creates: a hard link of a regular file within a home where
     * creates are native and the profile allows hard links, made on the
     * session's worker threads (linkat as JS does it), each name charged the
     * inode of a create slot
     */
    nativeLink: z.boolean().default(true),
    /** RMDIR of an empty directory done in the binding, in homes where it unlinks (fastpath_unlink.c); anything else JS's */
    nativeRmdir: z.boolean().default(true),
    /**
     * with native unlinks: a rename (flags 0 or RENAME_NOREPLACE) of a regular
     * file within a mutable binary home, over nothing or over a regular file,
     * neither open in the daemon, done on the session's worker threads (a
     * replaced file's bytes and inode released as a native unlink releases them)
     */
    nativeRename: z.boolean().default(true),
    /**
     * with nativeWrite and the fast path: the growth of a WRITE decided in
     * the binding from byte credit the ledger reserved ahead (fastpath_write.c)
     */
    nativeWriteDecision: z.boolean().default(true),
    /**
     * with native write decisions: an ftruncate of an open file whose charged size
     * the binding owns decided and done on the session's worker threads (growth
     * from the same byte credit as a write's, a cut's bytes given back); anything
     * else JS's
     */
    nativeTruncate: z.boolean().default(true),
    /**
     * opens whose FLUSH needs no answer from the daemon (every handle but a
     * writer in a text home) are answered with FOPEN_NOFLUSH: the kernel then
     * sends no FLUSH at their closes (Linux 5.17+; native/src/session/channel.c)
     */
    noFlush: z.boolean().default(true),
    /**
     * one session worker thread reads the device at a time and keeps doing so while
     * it answers natively; it hands over before it waits for JS, writes more
     * than 32 KiB or reads what the page cache does not hold, and a watchdog
     * hands over for it when one request
     * takes it 4 ms or more (native/src/session/channel.c). Off (the default):
     * libfuse's own loop, every idle thread reading: on a VM whose idle CPUs halt,
     * one reader is woken where it last ran, a halted CPU, at every request
     * (bench/results.md, "One reader or every worker reading")
     */
    singleReader: z.boolean().default(false),
    /**
     * with the fast path: UTIMENS by path, CHMOD by path where the profile's
     * chmod decision is a plain mask (home, posix), and CHOWN by path where it
     * changes nothing (to the home's owner) or the profile allows it, done on
     * the session's worker threads
     */
    nativeSetattr: z.boolean().default(true),
    /**
     * RELEASE (sent by the kernel after close(2) has returned; its result is
     * ignored) answered on a session worker thread; the daemon closes the handle
     * before the next request it serves, the next control command, or on a
     * timer (10 ms after activity, backing off to 1 s while idle)
     */
    nativeRelease: z.boolean().default(true),
    debug: z.boolean().default(false),
  })
  .strict();

export const ConfigSchema = z
  .object({
    backing: z.string().min(1),
    mount: z.string().min(1),
    socket: z.string().min(1).default('/run/homesfs/admin.sock'),
    /** serves only status and resolve: for the service that starts agents */
    platformSocket: z.string().min(1).default('/run/homesfs-platform/platform.sock'),
    /** admin socket 0660 with this group (else 0600) */
    adminGroup: z.number().int().min(0).max(0xfffffffe).optional(),
    /** platform socket 0660 with this group (else 0600) */
    platformGroup: z.number().int().min(0).max(0xfffffffe).optional(),
    /** settings, owners and per-home overrides survive restarts here; default `<backing>/.homesfs/state.json` (see stateFileOf) */
    stateFile: z.string().min(1).optional(),
    /** uids (and gids) allocated to new homes */
    owners: z
      .object({ from: z.number().int().min(1).max(0xfffffffe), to: z.number().int().min(1).max(0xfffffffe) })
      .strict()
      .refine((o) => o.from <= o.to, { message: 'owners.from must be <= owners.to' })
      .default({ from: 200000, to: 299999 }),
    /**
     * Serve even when the backing root or a tenant directory can be reached
     * by a non-root uid (homes could then be written around the ledger).
     */
    allowOpenBacking: z.boolean().default(false),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    defaultProfile: z.string().min(1).default('home'),
    profiles: z.record(ProfileNameSchema, ConfigProfileSchema).default({}),
    tenants: z.record(z.string(), TenantEntry).default({}),
    /** keyed "tenant/key" */
    homes: z.record(z.string().regex(/^[^/]+\/[^/]+$/, { message: 'a home is keyed "<tenant>/<key>"' }), HomeEntry).default({}),
    fuse: FuseOptions.default(FuseOptions.parse({})),
    /** metadata syscalls on the JS thread (fast on a local disk); false for a network backing (CephFS, NFS) */
    syncMetadata: z.boolean().default(true),
    /** on SIGTERM, how long to wait for homes in use (open files, working directories) before unmounting */
    shutdownGraceMs: z.number().int().min(0).max(600_000).default(10_000),
    /**
     * Keep the FUSE session alive through a crash of the daemon (src/holder/):
     * a holder process keeps a copy of its descriptor and the node table's
     * journal, and the next start resumes it (src/resume.ts). Restart only.
     */
    crashSurvival: z.boolean().default(true),
    /**
     * Who runs the holder process that keeps the session (crashSurvival;
     * ignored under systemd, whose fd store keeps it): 'spawn', the daemon
     * spawns one whenever none answers on holder.sock (at its registration,
     * and when the holder it registered with goes away); 'external',
     * something outliving the daemon's process runs it (the Kubernetes
     * `holder` container): the daemon never spawns one and registers with
     * whichever answers, again each time one answers after the last went
     * away. Restart only.
     */
    holder: z.enum(['spawn', 'external']).default('spawn'),
    /** Prometheus text endpoint, off unless one of these is set */
    metrics: z
      .object({
        socket: z.string().min(1).optional(),
        listen: z
          .string()
          .regex(/^(127\.0\.0\.1|\[::1\]):([0-9]{1,5})$/, { message: 'metrics.listen is 127.0.0.1:PORT or [::1]:PORT (loopback only)' })
          .refine((s) => Number(s.slice(s.lastIndexOf(':') + 1)) <= 65535, { message: 'port out of range' })
          .optional(),
      })
      .strict()
      .optional(),
    /**
     * The daemon's descriptors: RLIMIT_NOFILE set at start (absent: its hard
     * limit, i.e. the service manager's LimitNOFILE), a reserve kept for its
     * own work (directory cache, sockets, scans, logs), and the cap on one
     * uid's open files across homes (0 = off). Restart only.
     */
    limits: z
      .object({
        nofile: z.number().int().min(1024).max(1 << 30).optional(),
        /** at least the directory caches (1024, and the binding's 64) and room for sockets and scans */
        reserveFiles: z.number().int().min(1280).max(1 << 30).default(2048),
        openFilesPerUid: z.number().int().min(0).max(1 << 30).default(8192),
        /** open directory handles of one caller uid (uid 0 not counted), 0 = off: each costs libfuse one listing request (4 KiB) */
        dirHandlesPerUid: z.number().int().min(0).max(1 << 30).default(4096),
        /** open directory handles in all, 0 = off */
        dirHandles: z.number().int().min(0).max(1 << 30).default(16384),
      })
      .strict()
      .refine((l) => l.nofile === undefined || l.nofile - l.reserveFiles >= 256, {
        message: "limits.nofile must exceed limits.reserveFiles by at least 256 (what is left is for the homes' open files)",
      })
      .default({ reserveFiles: 2048, openFilesPerUid: 8192, dirHandlesPerUid: 4096, dirHandles: 16384 }),
    probe: z
      .object({ intervalMs: z.number().int().min(500).default(10_000), timeoutMs: z.number().int().min(200).default(5_000) })
      .strict()
      .default({ intervalMs: 10_000, timeoutMs: 5_000 }),
    /** the sealed environment of commands run in a home (homesctl exec, execInHome); sent with every resolve reply */
    exec: ExecPolicySchema.default(DEFAULT_EXEC_POLICY),
    /** owner names for NSS: systemd userdb drop-in records (nss-systemd reads /run/userdb) */
    userdb: z
      .object({ enabled: z.boolean().default(true), dir: z.string().min(1).refine((p) => p.startsWith('/'), { message: 'must be an absolute path' }).default('/run/userdb') })
      .strict()
      .default({ enabled: true, dir: '/run/userdb' }),
  })
  .strict();

export type Config = z.infer<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;
