import { z } from 'zod';
import { checkSegment, classifyKey, keyFor } from '../paths/names.js';
import { MAX_ID } from '../scope/owners.js';

export const STATE_VERSION = 1;
/** Every string in the state file is bounded: a hand-edited file cannot grow a name without limit. */
export const STATE_STRING_MAX = 256;

const Str = z.string().max(STATE_STRING_MAX);

/** Run a names.ts check as a zod refinement: the HomesError message becomes the issue. */
function segment(check: (value: string) => void) {
  return Str.superRefine((value, ctx) => {
    try {
      check(value);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: err instanceof Error ? err.message : String(err) });
    }
  });
}

const TenantName = segment((v) => checkSegment('tenant', v));
const ProjectName = segment((v) => keyFor('project', v));
const Login = segment((v) => checkSegment('login', v));
/** "tenant/key": a tenant and a key of the per-scope-home vocabulary */
const HomeRef = segment((v) => {
  const slash = v.indexOf('/');
  if (slash < 0) throw new Error('a home is keyed "<tenant>/<key>"');
  checkSegment('tenant', v.slice(0, slash));
  classifyKey(v.slice(slash + 1));
});

export const OwnerSchema = z
  .strictObject({
    uid: z.number().int().min(0).max(MAX_ID),
    gid: z.number().int().min(0).max(MAX_ID),
  });

/** One tenant's home-scope cascade. Values are raw strings: resolveScope treats garbage as `project`. */
export const TenantSettingsSchema = z.strictObject({
  tenantDefault: Str.optional(),
  projects: z.record(ProjectName, Str).default({}),
  users: z.record(Login, Str).default({}),
});

export const HomeRecordSchema = z.strictObject({
  owner: OwnerSchema,
  /** the owner was given with `--force` (outside the range, or a host account above the system ids): start-up checks it as such */
  ownerForced: z.literal(true).optional(),
  /** the owner was read from the backing directory of a home found without a record, not given: start-up does not check it */
  ownerFound: z.literal(true).optional(),
  profile: Str.min(1).optional(),
  /** byte budget override, 0 = off */
  budget: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  /** inode cap override, 0 = off */
  maxInodes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  /** per-file cap override in bytes, 0 = off */
  maxFileBytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  /** soft byte limit override (a warn threshold), 0 = off */
  softBytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  /** soft inode limit override, 0 = off */
  softInodes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  createdAt: z.iso.datetime({ offset: true }).max(STATE_STRING_MAX),
});

/** A renamed home's old name, reserved: resolve answers RENAMED with `to` until an admin releases it. */
export const ForwardSchema = z.strictObject({
  to: HomeRef,
  at: z.iso.datetime({ offset: true }).max(STATE_STRING_MAX),
});

/**
 * Owner ids already handed out. The allocator only moves forward from
 * `highWater`; `retired` keeps the ids of deleted homes (tombstones) so that
 * neither a changed range nor an explicit `--owner` can give one out again.
 */
export const OwnersStateSchema = z.strictObject({
  highWater: z.number().int().min(0).max(MAX_ID).optional(),
  retired: z.array(z.number().int().min(0).max(MAX_ID)).max(10_000_000).default([]),
});

/** A tenant's live overrides. */
export const TenantRecordSchema = z.strictObject({
  /** total byte budget across the tenant's homes, 0 = off (absent: the config's `tenants.<t>.maxBytes`) */
  maxBytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
});

export const StateSchema = z.strictObject({
  version: z.literal(STATE_VERSION),
  /** tenant → cascade */
  settings: z.record(TenantName, TenantSettingsSchema).default({}),
  /** "tenant/key" → record */
  homes: z.record(HomeRef, HomeRecordSchema).default({}),
  /** old "tenant/key" → forward (absent in files written before renames reserved names) */
  forwards: z.record(HomeRef, ForwardSchema).optional(),
  owners: OwnersStateSchema.default({ retired: [] }),
  /** tenant → live overrides (absent until the first one is set) */
  tenants: z.record(TenantName, TenantRecordSchema).optional(),
});

export type OwnerRecord = z.infer<typeof OwnerSchema>;
export type TenantSettings = z.infer<typeof TenantSettingsSchema>;
export type HomeRecord = z.infer<typeof HomeRecordSchema>;
export type TenantRecord = z.infer<typeof TenantRecordSchema>;
export type State = z.infer<typeof StateSchema>;
export type OwnersState = z.infer<typeof OwnersStateSchema>;

/** The state key of a home. */
export function homeRef(tenant: string, key: string): string {
  return `${tenant}/${key}`;
}

/** A fresh, empty state (what a missing file means). */
export function emptyState(): State {
  return { version: STATE_VERSION, settings: {}, homes: {}, owners: { retired: [] } };
}

/**
 * Keys JSON.parse keeps but a plain-object record cannot hold: zod silently
 * drops "__proto__", which would lose a setting or a home without a word.
 * Reported as issues instead, with their paths.
 */
export function reservedKeyIssues(input: unknown): string[] {
  const issues: string[] = [];
  const obj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  const check = (record: unknown, path: string): void => {
    if (obj(record) && Object.hasOwn(record, '__proto__')) issues.push(`${path}.__proto__: "__proto__" cannot be used as a name`);
  };
  if (!obj(input)) return issues;
  check(input.settings, 'settings');
  check(input.homes, 'homes');
  check(input.forwards, 'forwards');
  check(input.tenants, 'tenants');
  if (obj(input.settings)) {
    for (const [tenant, t] of Object.entries(input.settings)) {
      if (!obj(t)) continue;
      check(t.projects, `settings.${tenant}.projects`);
      check(t.users, `settings.${tenant}.users`);
    }
  }
  return issues;
}

/** Every problem of an input, each with its path; empty when the input is a valid state. */
export function stateIssues(input: unknown): { state: State | null; issues: string[] } {
  const issues = reservedKeyIssues(input);
  const parsed = StateSchema.safeParse(input);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      issues.push(`${issue.path.length ? issue.path.map(String).join('.') : '(root)'}: ${describe(issue)}`);
    }
  }
  return { state: parsed.success && issues.length === 0 ? parsed.data : null, issues };
}

/** zod's "Invalid key in record" hides the reason in nested issues: bring it up. */
function describe(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_key' && issue.issues.length > 0) {
    return `invalid name: ${issue.issues.map((i) => i.message).join('; ')}`;
  }
  return issue.message;
}
