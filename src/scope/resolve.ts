import { HomesError } from '../errors.js';
import { checkSegment, classifyKey, keyFor, type HomeScope } from '../paths/names.js';

export type { HomeScope } from '../paths/names.js';

/** The three values the `home-scope` setting may hold (per-scope-home §2). */
export const HOME_SCOPES: readonly HomeScope[] = Object.freeze(['project', 'tenant', 'user'] as const);

/**
 * One tenant's `home-scope` cascade as stored: raw strings, exactly as an admin
 * (or a hand-edited state file) left them. Nothing here is trusted: a value
 * that is not one of the three enum strings is treated as `project`.
 */
export interface ScopeSettings {
  tenantDefault?: string;
  /** project name → raw setting */
  projects: Record<string, string>;
  /** login → raw setting */
  users: Record<string, string>;
}

export type ScopeSource = 'user' | 'project' | 'tenant' | 'default';

export interface ScopeRequest {
  tenant: string;
  project: string;
  /** the login the subprocess runs for; absent for e.g. work_exec_run without a user */
  user?: string;
}

export interface ScopeResolution {
  scope: HomeScope;
  /** the cascade level that decided ('default' when no level holds a value) */
  source: ScopeSource;
  /** the home's key: `<project>`, `_tenant` or `_user_<login>`, always from keyFor */
  key: string;
  /** set when the deciding value was not a valid scope; the caller logs it at WARN */
  warning?: string;
  /** set when the deciding value was `user` but the request has no user: the project home is used */
  fallback?: true;
}

const MAX_SHOWN = 64;

/** A garbage value, made safe for a log line: bounded, quoted, control characters escaped. */
function show(value: unknown): string {
  if (typeof value !== 'string') return `<${value === null ? 'null' : typeof value}>`;
  const cut = value.length > MAX_SHOWN ? `${value.slice(0, MAX_SHOWN)}…` : value;
  return JSON.stringify(cut.toWellFormed());
}

function isScope(value: unknown): value is HomeScope {
  return value === 'project' || value === 'tenant' || value === 'user';
}

/** Own properties only: a project called "constructor" must not find Object.prototype.constructor. */
function own(record: Record<string, unknown> | undefined, name: string): unknown {
  if (record === null || typeof record !== 'object') return undefined;
  return Object.hasOwn(record, name) ? record[name] : undefined;
}

/**
 * Resolve the `home-scope` cascade (per-scope-home §2): the user's setting (only
 * when the request names a user) → the project's → the tenant default →
 * `project`. The first level that holds a value decides; a value that is not
 * exactly `project`, `tenant` or `user` means `project` with a warning: a typo
 * can only narrow sharing, never widen it (and never falls through to a wider
 * level below it). `user` without a user in the request falls back to the
 * project home (`fallback: true`).
 *
 * Every name is validated before anything else: tenant, project (which may not
 * begin with `_`, so `_user_alice` can never reach alice's home) and login.
 * Throws HomesError INVALID_NAME / NAME_TOO_LONG / NOT_UTF8_NAME.
 */
export function resolveScope(settings: ScopeSettings | undefined, req: ScopeRequest): ScopeResolution {
  checkSegment('tenant', req.tenant);
  const projectKey = keyFor('project', req.project);
  const user = req.user;
  if (user !== undefined) keyFor('user', user);

  let source: ScopeSource = 'default';
  let raw: unknown;
  if (settings !== undefined && settings !== null) {
    const levels: Array<[ScopeSource, unknown]> = [
      ['user', user === undefined ? undefined : own(settings.users, user)],
      ['project', own(settings.projects, req.project)],
      ['tenant', Object.hasOwn(settings, 'tenantDefault') ? settings.tenantDefault : undefined],
    ];
    for (const [level, value] of levels) {
      if (value !== undefined) {
        source = level;
        raw = value;
        break;
      }
    }
  }

  if (source === 'default') return { scope: 'project', source, key: projectKey };
  if (!isScope(raw)) {
    const where = source === 'user' ? `user "${user}"` : source === 'project' ? `project "${req.project}"` : 'the tenant default';
    return {
      scope: 'project',
      source,
      key: projectKey,
      warning: `home-scope ${show(raw)} set for ${where} of tenant "${req.tenant}" is not one of project|tenant|user; using the project home`,
    };
  }
  switch (raw) {
    case 'project':
      return { scope: 'project', source, key: projectKey };
    case 'tenant':
      return { scope: 'tenant', source, key: keyFor('tenant', null) };
    case 'user':
      if (user === undefined) return { scope: 'project', source, key: projectKey, fallback: true };
      return { scope: 'user', source, key: keyFor('user', user) };
  }
}

/**
 * True for a project home left behind by a home-scope change (per-scope-home
 * §6): the key is a project key and that project now resolves, without a user,
 * to a shared scope. A project set to `user` is not an orphan: a request
 * without a user still falls back to its project home. Throws HomesError for
 * an invalid tenant or key.
 */
export function isOrphan(settings: ScopeSettings | undefined, tenant: string, key: string): boolean {
  checkSegment('tenant', tenant);
  const info = classifyKey(key);
  if (info.scope !== 'project' || info.subject === null) return false;
  return resolveScope(settings, { tenant, project: info.subject }).scope !== 'project';
}

/** Parse a scope value given on the control socket (settings set); INVALID_ARGUMENT otherwise. */
export function parseHomeScope(value: unknown): HomeScope {
  if (isScope(value)) return value;
  throw new HomesError('INVALID_ARGUMENT', `home-scope must be one of project|tenant|user, not ${show(value)}`);
}
