import { posix } from 'node:path';
import { HomesError } from '../errors.js';
import type { ExecPolicy } from './policy.js';

/**
 * The sealed environment of a command started in a home. PURE: the order of
 * the layers is the contract (per-scope-home §4, agent-toolbox's sealed exec):
 *
 *   1. only the caller's variables named by the allow-list (LANG, LC_*, TERM, TZ)
 *   2. PATH from the policy (never the caller's: its directories, root's among
 *      them, need not be searchable by the owner), HOME = the home, and the
 *      owner's identity: USER, LOGNAME, SHELL, EMAIL (and git's name when the
 *      node has no name for the owner)
 *   3. cache and config locations redirected inside the home
 *   4. the home's tools file (.homesfs/env.sh), sourced on top of 1–3 by the owner
 *   5. the caller's extras (--env), which win over everything, HOME and PATH included
 *
 * Nothing else of the caller's environment gets through.
 */

export type Env = Record<string, string>;
export type CallerEnv = Readonly<Record<string, string | undefined>>;

/** Variables a shell adds by itself: not the tools file's doing, so not passed on from it. */
const SHELL_NOISE = ['PWD', 'OLDPWD', 'SHLVL', '_'];

function matches(name: string, pattern: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern;
}

export function isAllowed(name: string, allow: readonly string[]): boolean {
  return allow.some((p) => matches(name, p));
}

/** A redirected value: `{home}` replaced, or a path relative to the home. */
export function redirectValue(value: string, home: string): string {
  return value.includes('{home}') ? value.replaceAll('{home}', home) : posix.join(home, value);
}

/**
 * Who the command runs as, as the node's user database (NSS) knows the owner,
 * or, where it does not, as the daemon names it (`resolve`'s userName).
 */
export interface OwnerIdentity {
  /** USER and LOGNAME */
  name: string;
  /** the record's login shell when it is a usable one; absent: the policy's `shell` */
  shell?: string;
  /**
   * git's author and committer name, only where git would find none by itself
   * (no passwd entry for the owner, or an empty real name): set, it outranks a
   * user.name the owner configures, so it is never set when not needed
   */
  gitName?: string;
}

type BasePolicy = Pick<ExecPolicy, 'allowEnv' | 'redirect' | 'path' | 'shell' | 'emailDomain'>;

/** The owner's part of layer 2. EMAIL is what git takes before guessing from the host name (which has no domain on most nodes). */
export function identityEnv(owner: OwnerIdentity, policy: Pick<ExecPolicy, 'shell' | 'emailDomain'>): Env {
  const env: Env = { USER: owner.name, LOGNAME: owner.name, SHELL: owner.shell ?? policy.shell };
  if (policy.emailDomain !== '') env.EMAIL = `${owner.name}@${policy.emailDomain}`;
  if (owner.gitName !== undefined) {
    env.GIT_AUTHOR_NAME = owner.gitName;
    env.GIT_COMMITTER_NAME = owner.gitName;
  }
  return env;
}

/** Layers 1–3: what the tools file is sourced on, and the whole base when there is none. */
export function baseEnv(caller: CallerEnv, home: string, policy: BasePolicy, owner: OwnerIdentity): Env {
  const env: Env = {};
  for (const [name, value] of Object.entries(caller)) {
    if (value !== undefined && !value.includes('\0') && isAllowed(name, policy.allowEnv)) env[name] = value;
  }
  env.PATH = policy.path;
  env.HOME = home;
  Object.assign(env, identityEnv(owner, policy));
  for (const [name, value] of Object.entries(policy.redirect)) env[name] = redirectValue(value, home);
  return env;
}

export interface SealedEnvInput {
  /** the caller's environment: only allow-listed names are read */
  callerEnv: CallerEnv;
  /** the home's absolute path */
  home: string;
  policy: BasePolicy;
  /** the owner's identity (`ResolvedHome.identity`, or `ownerIdentity(...)`) */
  owner: OwnerIdentity;
  /**
   * The environment the tools file left when sourced on top of `baseEnv(...)`
   * (see `envFromDump`), or null/undefined when there is none or it was skipped.
   */
  toolsEnv?: Env | null;
  /** the caller's own variables: applied last, they win */
  extras?: Readonly<Record<string, string>>;
}

export function sealedEnv(input: SealedEnvInput): Env {
  const layered = input.toolsEnv ? { ...input.toolsEnv } : baseEnv(input.callerEnv, input.home, input.policy, input.owner);
  for (const [name, value] of Object.entries(input.extras ?? {})) {
    checkAssignment(name, value);
    layered[name] = value;
  }
  return layered;
}

/** Refuse extras that are not variables, before anything runs. */
export function checkExtras(extras: Readonly<Record<string, string>>): void {
  for (const [name, value] of Object.entries(extras)) checkAssignment(name, value);
}

function checkAssignment(name: string, value: string): void {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new HomesError('INVALID_ARGUMENT', `'${name}' is not a valid environment variable name`);
  if (value.includes('\0')) throw new HomesError('INVALID_ARGUMENT', `the value of ${name} contains a NUL byte`);
}

/** `K=V` from the command line (`--env`): the value may contain `=` and be empty. */
export function parseAssignment(s: string): [string, string] {
  const eq = s.indexOf('=');
  if (eq <= 0) throw new HomesError('INVALID_ARGUMENT', `--env expects NAME=VALUE, got '${s}'`);
  const name = s.slice(0, eq);
  const value = s.slice(eq + 1);
  checkAssignment(name, value);
  return [name, value];
}

/**
 * The environment `env -0` printed after the tools file was sourced on `base`:
 * NUL-separated `K=V` records. What the shell adds by itself (PWD, SHLVL, `_`)
 * is dropped unless `base` had it.
 */
export function envFromDump(dump: string, base: Env): Env {
  const env: Env = {};
  for (const rec of dump.split('\0')) {
    const eq = rec.indexOf('=');
    if (eq <= 0) continue;
    const name = rec.slice(0, eq);
    if (SHELL_NOISE.includes(name) && !Object.hasOwn(base, name)) continue;
    env[name] = rec.slice(eq + 1);
  }
  return env;
}

/**
 * The working directory: the home, or `cwd` inside it (relative to the home,
 * or absolute under it). Lexical check only; the directory is entered by the
 * owner, so the kernel's permission checks apply too.
 */
export function cwdInHome(home: string, cwd?: string): string {
  if (cwd === undefined || cwd === '') return home;
  if (cwd.includes('\0')) throw new HomesError('INVALID_ARGUMENT', '--cwd contains a NUL byte');
  const dir = posix.resolve(home, cwd);
  if (dir !== home && !dir.startsWith(home.endsWith('/') ? home : `${home}/`)) {
    throw new HomesError('INVALID_ARGUMENT', `--cwd ${cwd} is outside the home ${home}`);
  }
  return dir;
}
