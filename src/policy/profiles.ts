/**
 * Named profiles: a home's whole write-time policy in one value.
 *
 * PURE. The config loader validates profile definitions with `ProfileSchema`,
 * merges them with `BUILTIN_PROFILES`, checks every referenced name with
 * `validateProfileNames`, and the fs layer asks the helpers below what a
 * create/mkdir/chmod/symlink should do. Policies are explicit string unions
 * (bindfs's `enum ChmodPolicy` idea) so a config typo is a validation error,
 * not a silently different behaviour.
 */

import { z } from 'zod';
import { ABI } from '../abi.js';
import { byteSizeSchema } from './size.js';

/** Permission bits: rwx for user/group/other. */
export const PERMISSION_BITS = 0o777;
/** With setuid, setgid and sticky: what a profile with `specialBits: 'keep'` stores. */
export const ALL_MODE_BITS = 0o7777;
const USER_EXEC = 0o100;
/** The owner's rwx: all a tool home ever stores. */
export const OWNER_BITS = 0o700;

const byteCount = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
/** A byte limit: a number, or a size string such as "2G" (the CLI's units). */
const byteSize = byteSizeSchema(byteCount);

const MODE_HINT = 'a mode is a number up to 0o777 (511), an octal string such as "0600", or "asked"';

/**
 * A mode is a number (JSON has no octal literals: 0o600 is 384), an octal
 * string ("0600", "600", "0o600"), or 'asked' (the creator's mode). A decimal
 * 600 is out of range (> 0o777) and refused with a hint: the usual mistake.
 */
const ForcedOrAsked = z
  .union(
    [
      z.literal('asked'),
      z.number(),
      z
        .string()
        .regex(/^(0o?)?[0-7]{1,3}$/)
        .transform((s) => Number.parseInt(s.replace(/^0o/, ''), 8)),
    ],
    { error: MODE_HINT },
  )
  .superRefine((v, ctx) => {
    if (typeof v === 'number' && !(Number.isInteger(v) && v >= 0 && v <= PERMISSION_BITS)) {
      ctx.addIssue({ code: 'custom', message: `${MODE_HINT}; got ${v} (decimal 600 is not 0o600: write 384 or "0600")` });
    }
  });

/** An absolute path as a process in the home sees it: no `.`/`..` components, no trailing `/`. */
const AbsolutePath = z
  .string()
  .regex(/^\/./, { message: 'an absolute path' })
  .refine((s) => !s.split('/').some((c) => c === '.' || c === '..') && !s.endsWith('/') && !s.includes('\0'), {
    message: 'an absolute path without "." or ".." components and without a trailing "/"',
  });

/** A directory prefix such as "/usr/": absolute, ends with "/", no `.`/`..` components. */
const DirPrefix = z
  .string()
  .regex(/^\/(.*\/)?$/, { message: 'a directory prefix is absolute and ends with "/"' })
  .refine((s) => !s.split('/').some((c) => c === '.' || c === '..') && !s.includes('\0'), {
    message: 'a prefix without "." or ".." components',
  })
  .refine((s) => s !== '/', { message: '"/" would allow every target' });

/**
 * Open files of one home at a time (each costs the daemon a descriptor), 0 =
 * off. Optional in a full definition written before it existed: the `home`
 * value then applies.
 */
const OpenFiles = z.number().int().nonnegative().max(1 << 30);
export const DEFAULT_MAX_OPEN_FILES = 4096;

/**
 * A soft limit: usage above it is shown (status, list, metrics) and logged
 * once per crossing, nothing is refused. Optional in a full definition
 * written before it existed: absent means off.
 */
const SoftLimit = byteCount;

/** Soft limits at most their hard limits (when those are on): a soft limit past the hard stop would never warn. */
export function softLimitIssues(p: { maxHomeBytes: number; softHomeBytes?: number; maxInodes: number; softInodes?: number }): Array<{ path: string; message: string }> {
  const out: Array<{ path: string; message: string }> = [];
  if (p.maxHomeBytes > 0 && (p.softHomeBytes ?? 0) > p.maxHomeBytes) {
    out.push({ path: 'softHomeBytes', message: `softHomeBytes (${p.softHomeBytes}) must be at most maxHomeBytes (${p.maxHomeBytes})` });
  }
  if (p.maxInodes > 0 && (p.softInodes ?? 0) > p.maxInodes) {
    out.push({ path: 'softInodes', message: `softInodes (${p.softInodes}) must be at most maxInodes (${p.maxInodes})` });
  }
  return out;
}

/** The fields of a profile; `ProfileSchema` adds the cross-field rules. */
export const ProfileShape = z
  .strictObject({
    /** sum of logical file sizes in the home, bytes, 0 = off */
    maxHomeBytes: byteSize,
    /** warn threshold on the home's bytes (refuses nothing), at most maxHomeBytes, 0 = off */
    softHomeBytes: byteSize.default(0),
    /** names in the home (files, directories, symlinks, each hard link), 0 = off */
    maxInodes: byteCount,
    /** warn threshold on the home's inodes (refuses nothing), at most maxInodes, 0 = off */
    softInodes: SoftLimit.default(0),
    /** logical size of one file, bytes, 0 = off */
    maxFileBytes: byteSize,
    /** 'utf8': every write is validated (EILSEQ), and reads of invalid files fail */
    content: z.enum(['binary', 'utf8']),
    /** forced permission bits for new files, or 'asked' (the creator's mode) */
    fileMode: ForcedOrAsked,
    /** forced permission bits for new directories, or 'asked' */
    dirMode: ForcedOrAsked,
    /** keep u+x when the creator/chmod asks for it (homes that install tools) */
    allowUserExec: z.boolean(),
    /** 'ignore': chmod succeeds and the forced mode stays (bindfs --chmod-ignore);
     *  'deny-widen': EPERM when the mode would gain bits beyond the forced mode;
     *  'owner': the owner's bits as asked, group/other/special bits dropped
     *  silently (a tool home: pip and npm chmod 755, git chmod 444);
     *  'allow': the mode asked for (permission bits only) */
    chmod: z.enum(['ignore', 'deny-widen', 'owner', 'allow']),
    /** 'inside-home': a target must stay in the home (relative, under the
     *  home's own path or an alias, or under a system prefix), judged at
     *  creation (EPERM) and at every follow (EACCES) */
    symlinks: z.enum(['deny', 'inside-home', 'any']),
    /** read-only system trees a link may point into (venv's bin/python -> /usr/bin/python3) */
    symlinkSystemPrefixes: z.array(DirPrefix).max(64),
    /** other absolute paths at which processes see this home (a tool container's /home/user) */
    homeAliases: z.array(AbsolutePath).max(16),
    hardLinks: z.enum(['deny', 'inside-home']),
    /** mknod, mkfifo and bind(2) of a Unix socket: 'none' (EPERM), 'fifo-socket'
     *  (FIFOs and sockets), 'all' (also block and character devices, for a caller
     *  with uid 0 only; the mount is nodev, so a device node opens nothing).
     *  The older spellings 'deny' and 'allow' mean 'none' and 'all'. */
    specialFiles: z.preprocess((v) => (v === 'deny' ? 'none' : v === 'allow' ? 'all' : v), z.enum(['none', 'fifo-socket', 'all'])),
    /** 'owner-only': chown to the presented owner (or -1) succeeds as a no-op,
     *  anything else EPERM; 'allow': passed to the backing store */
    chown: z.enum(['owner-only', 'allow']),
    /** setuid, setgid and sticky bits asked by create, mkdir or chmod: 'drop'
     *  (never stored) or 'keep' (as asked; the kernel's default_permissions rules
     *  decide who may set them, and the sticky-directory rule applies). The mount
     *  is nosuid, so a setuid file in a home gives no privilege on this host.
     *  Optional: absent means 'drop'. */
    specialBits: z.enum(['drop', 'keep']).optional(),
    /** open with direct I/O: every byte passes through write (shared writable
     *  mmap is refused by the kernel), so the UTF-8 validator sees everything */
    directIo: z.boolean(),
    /** 'deny': EOPNOTSUPP; 'user-counted': only user.* names, counted in bytes */
    xattrs: z.enum(['deny', 'user-counted']),
    /** directory nesting below the home root, 0 = off */
    maxDepth: byteCount,
    /** entries in one directory, 0 = off */
    maxEntriesPerDir: byteCount,
    /** bytes in one name component (at most the kernel's own cap, NAME_MAX) */
    maxNameBytes: z.number().int().min(1).max(ABI.NAME_MAX),
    /** files open in the home at once (EMFILE beyond), 0 = off */
    maxOpenFiles: OpenFiles.default(DEFAULT_MAX_OPEN_FILES),
  });

export const ProfileSchema = ProfileShape.superRefine((p, ctx) => {
  for (const issue of softLimitIssues(p)) ctx.addIssue({ code: 'custom', path: [issue.path], message: issue.message });
  // A forced mode that locks the owner out of its own home is never what was
  // meant (and would break every tool in it): the owner keeps rw on files
  // and rwx on directories.
  if (typeof p.fileMode === 'number' && (p.fileMode & 0o600) !== 0o600) {
    ctx.addIssue({ code: 'custom', path: ['fileMode'], message: 'a forced file mode must include u+rw (0o600)' });
  }
  if (typeof p.dirMode === 'number' && (p.dirMode & 0o700) !== 0o700) {
    ctx.addIssue({ code: 'custom', path: ['dirMode'], message: 'a forced directory mode must include u+rwx (0o700)' });
  }
});

/** Input as written in a config file (modes may be octal strings). */
export type ProfileInput = z.input<typeof ProfileSchema>;
/** A validated profile: modes are numbers or 'asked'. */
export type Profile = z.output<typeof ProfileSchema>;

/** Profile names: what a config key and a control-socket argument may be. */
export const ProfileNameSchema = z.string().regex(/^[a-z][a-z0-9_-]{0,63}$/, {
  message: 'a profile name is lower-case letters, digits, "-" or "_", starting with a letter, at most 64 characters',
});

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const KiB = 1024;

/** Read-only system trees a tool home's links may point into. */
export const DEFAULT_SYSTEM_PREFIXES: readonly string[] = ['/usr/', '/bin/', '/lib/', '/lib64/', '/opt/', '/etc/alternatives/'];

/**
 * The three built-ins. Every number is here so the README can quote it.
 * Parsed through the schema at load time: a built-in that breaks the schema's
 * own rules fails at import, not in production.
 */
export const BUILTIN_PROFILES: Readonly<Record<'home' | 'scratch' | 'posix', Readonly<Profile>>> = deepFreeze({
  /** The per-scope HOME, a tool home: venv, pip, npm, git, sdkman and make
   *  run unchanged. The owner's bits are the owner's (u+x included); nothing
   *  is ever open to another uid, and no link leads out of the home. */
  home: ProfileSchema.parse({
    maxHomeBytes: 2 * GiB,
    maxInodes: 1_000_000,
    maxFileBytes: 0,
    content: 'binary',
    fileMode: 0o600,
    dirMode: 0o700,
    allowUserExec: true,
    chmod: 'owner',
    symlinks: 'inside-home',
    symlinkSystemPrefixes: [...DEFAULT_SYSTEM_PREFIXES],
    homeAliases: [],
    hardLinks: 'inside-home',
    specialFiles: 'fifo-socket',
    chown: 'owner-only',
    directIo: false,
    xattrs: 'deny',
    // Far deeper than any real tool tree (the deepest directory of /usr,
    // node_modules, ~/.m2 or ~/.cargo is 8–18 levels; pnpm, bazel and Java
    // package trees stay under 40), far below what breaks tools and makes
    // every path longer than PATH_MAX: an owner cannot build a tree whose
    // walks and lookups cost thousands of levels.
    maxDepth: 128,
    maxEntriesPerDir: 0,
    maxNameBytes: ABI.NAME_MAX,
    // npm, git, make -j and a language server at once stay far below this; a
    // loop that opens without closing stops here, not at the daemon's limit.
    maxOpenFiles: DEFAULT_MAX_OPEN_FILES,
  }),
  /** The per-requester scratchpad: small, text only, no widening chmod. A mode
   *  without execute bits is hygiene, not a sandbox: `sh file` still runs it. */
  scratch: ProfileSchema.parse({
    maxHomeBytes: 4 * MiB,
    maxInodes: 4096,
    maxFileBytes: 256 * KiB,
    content: 'utf8',
    fileMode: 0o600,
    dirMode: 0o700,
    allowUserExec: false,
    chmod: 'deny-widen',
    symlinks: 'deny',
    symlinkSystemPrefixes: [],
    homeAliases: [],
    hardLinks: 'deny',
    specialFiles: 'none',
    chown: 'owner-only',
    directIo: true,
    xattrs: 'deny',
    maxDepth: 8,
    maxEntriesPerDir: 256,
    maxNameBytes: 128,
    // notes read and written one at a time
    maxOpenFiles: 128,
  }),
  /** Nothing beyond backing safety: the baseline that measures what the
   *  policies cost, and for trusted uses. */
  posix: ProfileSchema.parse({
    maxHomeBytes: 0,
    maxInodes: 0,
    maxFileBytes: 0,
    content: 'binary',
    fileMode: 'asked',
    dirMode: 'asked',
    allowUserExec: true,
    chmod: 'allow',
    symlinks: 'any',
    symlinkSystemPrefixes: [...DEFAULT_SYSTEM_PREFIXES],
    homeAliases: [],
    hardLinks: 'inside-home',
    specialFiles: 'all',
    chown: 'allow',
    specialBits: 'keep',
    directIo: false,
    xattrs: 'deny',
    maxDepth: 0,
    maxEntriesPerDir: 0,
    maxNameBytes: ABI.NAME_MAX,
    // trusted uses, but the daemon's descriptors are still shared with every home
    maxOpenFiles: 16384,
  }),
});

export const DEFAULT_PROFILE_NAME = 'home';

export type BuiltinProfileName = keyof typeof BUILTIN_PROFILES;

/**
 * A profile as a config file writes it: a full definition, or `extends` a
 * built-in and only the fields that differ. The merged result is validated
 * with the same schema as a full definition, so an override cannot produce
 * what a full definition could not.
 */
export const ConfigProfileSchema = ProfileShape.partial()
  // Without its default here: an absent field must keep the extended built-in's value.
  .extend({ maxOpenFiles: OpenFiles.optional(), softHomeBytes: byteSize.optional(), softInodes: SoftLimit.optional(), extends: z.enum(['home', 'scratch', 'posix']).optional() })
  .transform((input, ctx): Profile => {
    const { extends: base, ...fields } = input;
    const merged = base === undefined ? fields : { ...BUILTIN_PROFILES[base], ...fields };
    const r = ProfileSchema.safeParse(merged);
    if (r.success) return r.data;
    for (const issue of r.error.issues) {
      const why = base === undefined && issue.code === 'invalid_type' && issue.input === undefined ? `${issue.message} (or name a built-in with "extends")` : issue.message;
      ctx.addIssue({ code: 'custom', path: issue.path, message: why });
    }
    return z.NEVER;
  });

export type ProfileSource = 'override' | 'home' | 'tenant' | 'default';

/**
 * Which profile applies to a home. Precedence: a live override (control
 * socket) > the config's entry for the home > the tenant's default > the
 * configured default. An empty string counts as "not set" at every level.
 * Existence is not checked here: names are validated when config and
 * overrides are accepted (`validateProfileNames`), so resolution cannot fail.
 */
export function resolveProfileName(input: {
  override?: string;
  homeEntry?: string;
  tenantDefault?: string;
  configDefault: string;
}): { name: string; source: ProfileSource } {
  if (input.override) return { name: input.override, source: 'override' };
  if (input.homeEntry) return { name: input.homeEntry, source: 'home' };
  if (input.tenantDefault) return { name: input.tenantDefault, source: 'tenant' };
  return { name: input.configDefault, source: 'default' };
}

/**
 * Names that are not defined, each once, in first-seen order. The config loader
 * turns a non-empty result into a startup error (and a reload into a refusal).
 * Own properties only: "constructor" or "__proto__" are not profiles.
 */
export function validateProfileNames(names: string[], defined: Record<string, Profile>): string[] {
  const unknown: string[] = [];
  for (const name of names) {
    if (!Object.hasOwn(defined, name) && !unknown.includes(name)) unknown.push(name);
  }
  return unknown;
}

/**
 * Permission bits for a new file. A forced mode wins over what the creator
 * asked (after umask); with `allowUserExec`, a requested u+x is kept.
 */
/** The mode bits a profile stores at all. */
export function storedBits(profile: Profile): number {
  return profile.specialBits === 'keep' ? ALL_MODE_BITS : PERMISSION_BITS;
}

export function effectiveFileMode(profile: Profile, requestedMode: number): number {
  const asked = requestedMode & PERMISSION_BITS;
  if (profile.fileMode === 'asked') return requestedMode & storedBits(profile);
  const exec = profile.allowUserExec && (asked & USER_EXEC) !== 0 ? USER_EXEC : 0;
  return profile.fileMode | exec;
}

/** Permission bits for a new directory: the forced mode, or what was asked. */
export function effectiveDirMode(profile: Profile, requestedMode: number): number {
  if (profile.dirMode === 'asked') return requestedMode & storedBits(profile);
  return profile.dirMode;
}

export type SpecialKind = 'fifo' | 'socket' | 'char' | 'block';

/**
 * May `callerUid` create a special file of this kind? Devices need CAP_MKNOD,
 * which the kernel already checks before the request reaches the daemon; the
 * uid-0 test here is the daemon's own second wall.
 */
export function maySpecial(profile: Profile, kind: SpecialKind, callerUid: number): boolean {
  switch (profile.specialFiles) {
    case 'none':
      return false;
    case 'fifo-socket':
      return kind === 'fifo' || kind === 'socket';
    case 'all':
      return kind === 'fifo' || kind === 'socket' || callerUid === 0;
  }
}

export type ChmodDecision = { action: 'apply'; mode: number } | { action: 'keep' } | { action: 'refuse' };

/**
 * What chmod does. `currentMode` may be a full st_mode (type bits ignored).
 *  - 'allow': the requested bits (setuid/setgid/sticky only with specialBits 'keep').
 *  - 'owner': the requested owner bits; group, other and special bits are
 *    dropped and the chmod succeeds (pip's and npm's `chmod 755`).
 *  - 'ignore': succeed; the result is the forced mode (plus u+x when
 *    allowUserExec and asked). With an 'asked' mode there is nothing to force:
 *    the chmod is a successful no-op.
 *  - 'deny-widen': refuse (EPERM) if the request has any bit the forced mode
 *    does not (u+x counts as allowed with allowUserExec, special bits never
 *    are); narrowing is applied, and widening back up to the forced mode is
 *    allowed, so `chmod 400 f; chmod 600 f` works. With an 'asked' mode the
 *    ceiling is the current mode.
 * 'keep' is returned whenever the resulting bits equal the current ones, so the
 * caller skips a pointless backing chmod.
 */
export function chmodDecision(profile: Profile, isDir: boolean, currentMode: number, requestedMode: number): ChmodDecision {
  const current = currentMode & PERMISSION_BITS;
  const asked = requestedMode & PERMISSION_BITS;
  const forced = isDir ? profile.dirMode : profile.fileMode;
  const result = (mode: number): ChmodDecision => (mode === current ? { action: 'keep' } : { action: 'apply', mode });

  switch (profile.chmod) {
    case 'allow': {
      const bits = storedBits(profile);
      const want = requestedMode & bits;
      return want === (currentMode & bits) ? { action: 'keep' } : { action: 'apply', mode: want };
    }
    case 'owner':
      return result(asked & OWNER_BITS);
    case 'ignore':
      if (forced === 'asked') return { action: 'keep' };
      return result(isDir ? forced : effectiveFileMode(profile, requestedMode));
    case 'deny-widen': {
      const ceiling =
        forced === 'asked' ? current : forced | (!isDir && profile.allowUserExec ? USER_EXEC : 0);
      if ((requestedMode & 0o7000) !== 0 || (asked & ~ceiling) !== 0) return { action: 'refuse' };
      return result(asked);
    }
  }
}

/** Where absolute link targets may lead: the home's own paths and read-only system trees. */
export interface LinkScope {
  /** the home as processes see it: its mount path, then any aliases (absolute, no trailing "/") */
  homePaths: readonly string[];
  /** directory prefixes ending in "/" */
  systemPrefixes: readonly string[];
}

/**
 * Would a symlink with this target, standing in the directory `linkDirRel`
 * (components below the home root), resolve inside the home?
 *
 * String based (the target is stored as given). Relative targets resolve from
 * the link's own directory: any `..` that climbs above the home root is
 * outside, and so, conservatively, is a `..` after a named component
 * ("a/../b"): the kernel resolves `..` physically, and if "a" is itself a
 * symlink (say to "/usr"), "a/.." is the parent of where "a" points, which a
 * lexical check would not see. Leading `..` only climbs real directories (the
 * link's own directory chain), so it is checked exactly.
 *
 * Absolute targets are inside only with a `scope`: under one of the home's own
 * paths or under a system prefix, with no `..` anywhere (for the same reason).
 * Empty targets and NUL are outside.
 *
 * The caller judges again at every follow (readlink), from where the link
 * stands then: a link moved to a shallower place, or a home renamed under an
 * absolute link, is judged by what it would reach now.
 */
export function symlinkTargetInsideHome(linkDirRel: string[], target: string, scope?: LinkScope): boolean {
  if (target === '' || target.includes('\0')) return false;
  for (const c of linkDirRel) {
    // The directory chain must be real components; anything else is a caller bug
    // we answer with the safe "no".
    if (c === '' || c === '.' || c === '..' || c.includes('/') || c.includes('\0')) return false;
  }
  if (target.startsWith('/')) return scope !== undefined && absoluteTargetInside(target, scope);
  let depth = linkDirRel.length;
  let named = false;
  for (const c of target.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') {
      if (named) return false;
      depth -= 1;
      if (depth < 0) return false;
      continue;
    }
    named = true;
    depth += 1;
  }
  return true;
}

function absoluteTargetInside(target: string, scope: LinkScope): boolean {
  const parts = target.split('/').filter((c) => c !== '' && c !== '.');
  if (parts.includes('..')) return false;
  const norm = `/${parts.join('/')}`;
  for (const home of scope.homePaths) {
    if (norm === home || norm.startsWith(`${home}/`)) return true;
  }
  // "/usr" itself is inside the prefix "/usr/".
  return scope.systemPrefixes.some((prefix) => `${norm}/`.startsWith(prefix));
}
