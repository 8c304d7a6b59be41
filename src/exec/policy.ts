import { z } from 'zod';
import { byteSizeSchema } from '../policy/size.js';

/**
 * What an agent command started in a home (`homesctl exec`, `execInHome`) gets
 * from its environment: the `exec` section of the daemon's configuration. The
 * daemon hands it out with every `resolve` reply, so a caller on the platform
 * socket needs no copy of the config file. PURE: no node:fs here.
 */

/** An environment variable name, or a prefix pattern ending in `*` (`LC_*`). */
const EnvPattern = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*\*?$/, { message: 'an environment variable name, optionally ending in * (e.g. LC_*)' });
export const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: 'an environment variable name ([A-Za-z_][A-Za-z0-9_]*)' });

/**
 * A redirected location: a path relative to the home (`.cache`), or a template
 * in which `{home}` stands for the home (`-Dmaven.repo.local={home}/.m2/repository`).
 * A relative path may not climb out with `..`, and neither form may be absolute
 * without `{home}`: a redirection always lands inside the home.
 */
const RedirectValue = z
  .string()
  .min(1)
  .max(4096)
  .refine((v) => !v.includes('\0'), { message: 'no NUL bytes' })
  .refine((v) => v.includes('{home}') || (!v.startsWith('/') && !v.split('/').includes('..')), {
    message: 'a path relative to the home without "..", or a template containing {home}',
  });

/** prlimit(1) resource names that make sense to reset for an agent command. */
export const RLIMIT_NAMES = ['as', 'core', 'cpu', 'data', 'fsize', 'locks', 'memlock', 'msgqueue', 'nice', 'nofile', 'nproc', 'rss', 'rtprio', 'rttime', 'sigpending', 'stack'] as const;
/** The resources prlimit(1) counts in bytes: their limits may be written as sizes ("512M"), as in the rest of the config. */
export const BYTE_RLIMITS: ReadonlySet<(typeof RLIMIT_NAMES)[number]> = new Set(['as', 'core', 'data', 'fsize', 'memlock', 'msgqueue', 'rss', 'stack']);
const rlimit = (value: z.ZodType<number | 'unlimited', unknown>) =>
  z
    .strictObject({ soft: value, hard: value })
    .refine((l) => l.hard === 'unlimited' || (l.soft !== 'unlimited' && l.soft <= l.hard), { message: 'soft must not exceed hard' });
const CountRlimit = rlimit(z.union([z.int().min(0), z.literal('unlimited')], { error: 'a whole number (0 or more) or "unlimited"' }));
const ByteRlimit = rlimit(
  byteSizeSchema(z.union([z.literal('unlimited'), z.int().min(0).max(Number.MAX_SAFE_INTEGER)], { error: 'a whole number of bytes (0 or more), a size such as "512M", or "unlimited"' }), [
    'unlimited',
  ]),
);
/** One optional entry per resource (a strict object rather than a record, so a misspelt resource is named with its nearest one). */
const Rlimits = z.strictObject(
  Object.fromEntries(RLIMIT_NAMES.map((n) => [n, (BYTE_RLIMITS.has(n) ? ByteRlimit : CountRlimit).optional()])) as Record<
    (typeof RLIMIT_NAMES)[number],
    z.ZodOptional<typeof CountRlimit>
  >,
);

export const DEFAULT_ALLOW_ENV = ['LANG', 'LC_*', 'TERM', 'TZ'];
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Set for every command from the policy and the owner, never taken from the
 * caller: an allow-list or a redirection naming one of them is a mistake in
 * the config, not something to ignore quietly.
 */
export const SEALED_NAMES = ['PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'EMAIL'] as const;
const notSealed = (name: string) => !(SEALED_NAMES as readonly string[]).includes(name);
const SEALED_MESSAGE = `${SEALED_NAMES.join(', ')} are set for every command (exec.path, the home, the owner's record), never from the caller`;

/** A host name for the owner's EMAIL (git's identity); "" = no EMAIL. */
const EmailDomain = z
  .string()
  .max(253)
  .regex(/^$|^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/, { message: 'a domain name (e.g. homes.invalid), or "" for no EMAIL' });

export const DEFAULT_REDIRECT: Readonly<Record<string, string>> = {
  XDG_CACHE_HOME: '.cache',
  XDG_CONFIG_HOME: '.config',
  XDG_DATA_HOME: '.local/share',
  npm_config_cache: '.npm',
  PIP_CACHE_DIR: '.cache/pip',
  GRADLE_USER_HOME: '.gradle',
  MAVEN_OPTS: '-Dmaven.repo.local={home}/.m2/repository',
};

export const ExecPolicySchema = z
  .strictObject({
    /** the only variables of the caller's environment that reach the command */
    allowEnv: z
      .array(EnvPattern.refine(notSealed, { message: SEALED_MESSAGE }))
      .max(256)
      .default(DEFAULT_ALLOW_ENV),
    /** cache and config locations pointed inside the home (replaces the default list) */
    redirect: z.record(EnvName.refine(notSealed, { message: SEALED_MESSAGE }), RedirectValue).default({ ...DEFAULT_REDIRECT }),
    /** the home's own tools file, relative to the home; "" = none */
    envFile: z
      .string()
      .max(1024)
      .refine((v) => v === '' || (!v.startsWith('/') && !v.split('/').includes('..') && !v.includes('\0')), { message: 'a path relative to the home without ".."' })
      .default('.homesfs/env.sh'),
    /** how long sourcing the tools file may take before it is skipped */
    envFileTimeoutMs: z.int().min(100).max(600_000).default(10_000),
    /** PATH of every command (the tools file and --env may change it): the caller's PATH is never used, its entries may not be searchable by the owner */
    path: z
      .string()
      .min(1)
      .max(4096)
      .refine((p) => p.split(':').every((d) => d.startsWith('/') && !d.includes('\0')), { message: 'absolute directories separated by ":" (an empty or relative entry would mean the working directory)' })
      .default(DEFAULT_PATH),
    /** SHELL when the owner's user record has no usable shell (the daemon's records say /usr/sbin/nologin) */
    shell: z
      .string()
      .max(1024)
      .refine((p) => p.startsWith('/') && !p.includes('\0'), { message: 'an absolute path' })
      .default('/bin/bash'),
    /** EMAIL = <owner's user name>@<this>, so git and mail tools have an address without configuration; "" = no EMAIL */
    emailDomain: EmailDomain.default('homes.invalid'),
    /** resource limits set for the command instead of the caller's (a hard limit above the caller's is lowered to it: raising needs CAP_SYS_RESOURCE) */
    rlimits: Rlimits.default({ nofile: { soft: 1024, hard: 524288 } }),
    /** the command's oom_score_adj (the daemon's OOM protection is not inherited) */
    oomScoreAdj: z.int().min(-1000).max(1000).default(0),
  });

export type ExecPolicy = z.infer<typeof ExecPolicySchema>;
export type ExecPolicyInput = z.input<typeof ExecPolicySchema>;

export const DEFAULT_EXEC_POLICY: ExecPolicy = ExecPolicySchema.parse({});
