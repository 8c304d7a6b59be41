import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import type { z } from 'zod';
import { HomesError } from '../errors.js';
import { checkSegment, classifyKey, DAEMON_DIR } from '../paths/names.js';
import { BUILTIN_PROFILES, type Profile } from '../policy/profiles.js';
import { jsonErrorOffset, lineColumn } from './json-position.js';
import { ConfigSchema, type Config, type ConfigInput } from './schema.js';
import { withSuggestion } from './suggest.js';
import { configWarnings, type ConfigWarning } from './warnings.js';

export interface LoadedConfig {
  readonly config: Config;
  readonly profiles: Readonly<Record<string, Profile>>;
  readonly path: string | null;
  /** valid but most likely not meant (see configWarnings): printed by check-config, logged at start and reload */
  readonly warnings: readonly ConfigWarning[];
}

/**
 * `invalid`: the text was read and is wrong (every problem, with its path);
 * `unreadable`: there is no text to judge (no such file, no permission, a
 * directory). Both stop a start (exit 3) and refuse a reload.
 */
export type ConfigErrorKind = 'invalid' | 'unreadable';

export class ConfigError extends Error {
  constructor(
    readonly issues: string[],
    readonly kind: ConfigErrorKind = 'invalid',
    options?: { cause?: unknown },
  ) {
    super(kind === 'invalid' ? `invalid configuration:\n  ${issues.join('\n  ')}` : `cannot read the configuration: ${issues.join('; ')}`, options);
    this.name = 'ConfigError';
  }
}

/** What an admin should read for a file that could not be read, not "invalid configuration". */
function unreadable(file: string, err: unknown): ConfigError {
  const code = (err as NodeJS.ErrnoException).code;
  const why =
    code === 'ENOENT'
      ? 'no such file'
      : code === 'ENOTDIR'
        ? 'no such file (a component of the path is not a directory)'
        : code === 'EACCES' || code === 'EPERM'
          ? `permission denied (${code}): the file or a directory above it is not readable by this user`
          : code === 'EISDIR'
            ? 'is a directory, not a file'
            : `cannot be read: ${(err as Error).message}`;
  return new ConfigError([`${file}: ${why}`], 'unreadable', { cause: err });
}

/** The built-in demo: what `homesfs serve --demo` runs (its state lives under the backing, like any other). */
export const DEMO_DEFAULTS = {
  backing: '/var/lib/homesfs-demo/backing',
  mount: '/var/lib/homesfs-demo/homes',
  socket: '/run/homesfs-demo/admin.sock',
  platformSocket: '/run/homesfs-demo-platform/platform.sock',
} as const;
/** The demo's homes, made at start (owners from the pool) when missing. */
export const DEMO_HOMES = ['demo/_tenant', 'demo/hello'] as const;

export { DAEMON_DIR };

/**
 * Where the state lives: `stateFile` when the config sets it, else with its
 * backing tree (`<backing>/.homesfs/state.json`), so two unrelated instances
 * never share owners and overrides by accident.
 */
export function stateFileOf(config: Pick<Config, 'backing' | 'stateFile'>): string {
  return config.stateFile ?? join(config.backing, DAEMON_DIR, 'state.json');
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as Record<string, unknown>)) deepFreeze(v);
  }
  return o;
}

/**
 * zod's "Unrecognized key" with the nearest key the object does know, when one
 * is close: a misspelt key is the commonest config mistake, and the object
 * that refused it (the issue's `inst`) knows its own keys at that level.
 */
function unknownKeyMessage(iss: z.core.$ZodRawIssue): string | undefined {
  if (iss.code !== 'unrecognized_keys') return undefined;
  const shape = (iss.inst as { _zod?: { def?: { shape?: Record<string, unknown> } } } | undefined)?._zod?.def?.shape;
  const known = shape ? Object.keys(shape) : [];
  return `Unrecognized key${iss.keys.length > 1 ? 's' : ''}: ${iss.keys.map((k) => withSuggestion(k, known)).join(', ')}`;
}

/**
 * Validate once at start-up (and on reload), freeze, hand down. Every problem is
 * reported with its path, not just the first one.
 */
export function buildConfig(input: unknown, path: string | null): LoadedConfig {
  const parsed = ConfigSchema.safeParse(input, { error: unknownKeyMessage });
  const issues: string[] = parsed.success
    ? []
    : parsed.error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`);
  // The semantic checks also run on a config that failed the schema, on what
  // can be read of it, so one run reports every problem.
  const raw = (parsed.success ? parsed.data : typeof input === 'object' && input !== null ? input : {}) as Partial<Config>;
  const str = (v: unknown): v is string => typeof v === 'string';
  const obj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  for (const key of ['backing', 'mount', 'socket', 'platformSocket', 'stateFile'] as const) {
    const p = raw[key];
    if (str(p) && p.length > 0 && !isAbsolute(p)) issues.push(`${key}: must be an absolute path`);
  }
  const profiles: Record<string, Profile> = { ...BUILTIN_PROFILES };
  if (obj(raw.profiles)) {
    for (const [name, p] of Object.entries(raw.profiles)) {
      if (Object.hasOwn(BUILTIN_PROFILES, name)) issues.push(`profiles.${name}: redefines a built-in profile`);
      else profiles[name] = p as Profile;
    }
  }
  const known = (name: unknown, where: string) => {
    if (str(name) && !Object.hasOwn(profiles, name)) issues.push(`${where}: unknown profile ${withSuggestion(name, Object.keys(profiles))}`);
  };
  known(raw.defaultProfile, 'defaultProfile');
  if (obj(raw.tenants)) {
    for (const [tenant, t] of Object.entries(raw.tenants)) {
      try {
        checkSegment('tenant', tenant);
      } catch (err) {
        issues.push(`tenants.${tenant}: ${(err as HomesError).message}`);
      }
      if (obj(t)) known(t.defaultProfile, `tenants.${tenant}.defaultProfile`);
    }
  }
  if (obj(raw.homes)) {
    for (const [id, h] of Object.entries(raw.homes)) {
      const parts = id.split('/');
      if (parts.length !== 2 || parts.some((p) => p.length === 0)) {
        issues.push(`homes.${id}: a home is keyed "<tenant>/<key>"`);
      } else {
        try {
          checkSegment('tenant', parts[0]!);
          classifyKey(parts[1]!);
        } catch (err) {
          issues.push(`homes.${id}: ${(err as HomesError).message}`);
        }
      }
      if (obj(h)) known(h.profile, `homes.${id}.profile`);
    }
  }
  if (issues.length || !parsed.success) {
    // zod's "Invalid key in record" says less than our "<tenant>/<key>" line for the same key.
    const ours = new Set(issues.filter((i) => i.endsWith('a home is keyed "<tenant>/<key>"')).map((i) => i.split(': ')[0]));
    throw new ConfigError([...new Set(issues.filter((i) => !(i.endsWith('Invalid key in record') && ours.has(i.split(': ')[0]))))]);
  }
  return deepFreeze({ config: parsed.data, profiles, path, warnings: configWarnings(parsed.data, profiles) });
}

function fromText(file: string, text: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    const message = (err as Error).message;
    const { line, column } = lineColumn(text, jsonErrorOffset(text));
    throw new ConfigError([`${file}:${line}:${column}: not valid JSON (line ${line}, column ${column}): ${message}`]);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError([`${file}: the top level must be a JSON object`]);
  }
  return parsed as Record<string, unknown>;
}

export interface LoadOptions {
  /** no file: fill what the flags leave open from DEMO_DEFAULTS */
  demo?: boolean;
}

function merge(file: string | undefined, fromFile: Record<string, unknown>, overrides: Partial<ConfigInput>, opts: LoadOptions = {}): LoadedConfig {
  const merged: Record<string, unknown> = { ...fromFile };
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) merged[k] = v;
  if (file === undefined && opts.demo) {
    for (const [k, v] of Object.entries(DEMO_DEFAULTS)) if (merged[k] === undefined) merged[k] = v;
  }
  return buildConfig(merged, file ?? null);
}

/** Read at start-up only (before the mount exists), so the sync read blocks nobody. */
export function loadConfig(file: string | undefined, overrides: Partial<ConfigInput>, opts: LoadOptions = {}): LoadedConfig {
  if (file === undefined) return merge(undefined, {}, overrides, opts);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw unreadable(file, err);
  }
  return merge(file, fromText(file, text), overrides);
}

/** The two keys of the configuration a client needs, with the schema's own defaults. */
const SocketPathsSchema = ConfigSchema.pick({ socket: true, platformSocket: true }).loose();
export type SocketPaths = { readonly socket: string; readonly platformSocket: string };

/**
 * Where a daemon's control sockets are, read from its configuration file (for
 * homesctl). Only `socket` and `platformSocket` are validated: a file the
 * daemon would refuse for another key still says where to connect (to run
 * `reload` and hear why, say). Throws ConfigError; an unreadable file's
 * ConfigError carries the Node error (ENOENT, EACCES) as its cause.
 */
export function loadSocketPaths(file: string): SocketPaths {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw unreadable(file, err);
  }
  const parsed = SocketPathsSchema.safeParse(fromText(file, text));
  if (!parsed.success) throw new ConfigError(parsed.error.issues.map((i) => `${file}: ${i.path.join('.') || '(root)'}: ${i.message}`));
  const issues = (['socket', 'platformSocket'] as const).filter((k) => !isAbsolute(parsed.data[k])).map((k) => `${file}: ${k}: must be an absolute path`);
  if (issues.length > 0) throw new ConfigError(issues);
  return { socket: parsed.data.socket, platformSocket: parsed.data.platformSocket };
}

/** The same, read without blocking: for a reload while the mount is served. */
export async function reloadConfig(file: string, overrides: Partial<ConfigInput>): Promise<LoadedConfig> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw unreadable(file, err);
  }
  return merge(file, fromText(file, text), overrides);
}
