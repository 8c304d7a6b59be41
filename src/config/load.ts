import { readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { HomesError } from '../errors.js';
import { checkSegment, classifyKey } from '../paths/names.js';
import { BUILTIN_PROFILES, type Profile } from '../policy/profiles.js';
import { ConfigSchema, type Config, type ConfigInput } from './schema.js';

export interface LoadedConfig {
  readonly config: Config;
  readonly profiles: Readonly<Record<string, Profile>>;
  readonly path: string | null;
}

export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid configuration:\n  ${issues.join('\n  ')}`);
    this.name = 'ConfigError';
  }
}

/** The built-in demo: what `homesfs serve` runs with no flags and no file. */
export const DEMO_DEFAULTS = {
  backing: '/var/lib/homesfs-demo/backing',
  mount: '/var/lib/homesfs-demo/homes',
  socket: '/run/homesfs-demo/admin.sock',
} as const;

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as Record<string, unknown>)) deepFreeze(v);
  }
  return o;
}

/**
 * Validate once at start-up (and on reload), freeze, hand down. Every problem is
 * reported with its path, not just the first one.
 */
export function buildConfig(input: unknown, path: string | null): LoadedConfig {
  const parsed = ConfigSchema.safeParse(input);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`));
  }
  const config = parsed.data;
  const issues: string[] = [];
  for (const [key, p] of [['backing', config.backing], ['mount', config.mount], ['socket', config.socket]] as const) {
    if (!isAbsolute(p)) issues.push(`${key}: must be an absolute path`);
  }
  const profiles: Record<string, Profile> = { ...BUILTIN_PROFILES };
  for (const [name, p] of Object.entries(config.profiles)) {
    if (name in BUILTIN_PROFILES) issues.push(`profiles.${name}: redefines a built-in profile`);
    profiles[name] = p;
  }
  const known = (name: string | undefined, where: string) => {
    if (name !== undefined && !(name in profiles)) issues.push(`${where}: unknown profile "${name}"`);
  };
  known(config.defaultProfile, 'defaultProfile');
  for (const [tenant, t] of Object.entries(config.tenants)) {
    try {
      checkSegment('tenant', tenant);
    } catch (err) {
      issues.push(`tenants.${tenant}: ${(err as HomesError).message}`);
    }
    known(t.defaultProfile, `tenants.${tenant}.defaultProfile`);
  }
  for (const [id, h] of Object.entries(config.homes)) {
    const [tenant = '', key = ''] = id.split('/');
    try {
      checkSegment('tenant', tenant);
      classifyKey(key);
    } catch (err) {
      issues.push(`homes.${id}: ${(err as HomesError).message}`);
    }
    known(h.profile, `homes.${id}.profile`);
  }
  if (issues.length) throw new ConfigError(issues);
  return deepFreeze({ config, profiles, path });
}

/** Read at start-up only (before the mount exists), so the sync read blocks nobody. */
export function loadConfig(file: string | undefined, overrides: Partial<ConfigInput>): LoadedConfig {
  let fromFile: Record<string, unknown> = {};
  if (file !== undefined) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new ConfigError([`${file}: ${(err as Error).message}`]);
    }
    try {
      fromFile = JSON.parse(text) as Record<string, unknown>;
    } catch (err) {
      throw new ConfigError([`${file}: not valid JSON: ${(err as Error).message}`]);
    }
    if (typeof fromFile !== 'object' || fromFile === null || Array.isArray(fromFile)) {
      throw new ConfigError([`${file}: the top level must be a JSON object`]);
    }
  }
  const merged: Record<string, unknown> = { ...fromFile };
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) merged[k] = v;
  if (file === undefined) {
    for (const [k, v] of Object.entries(DEMO_DEFAULTS)) if (merged[k] === undefined) merged[k] = v;
  }
  return buildConfig(merged, file ?? null);
}
