import { HomesError } from '../errors.js';
import { OVERFLOW_ID, type Owner, type OwnerRange } from './owners.js';

/**
 * Whether an owner may be given to a home. PURE: what the host's user database
 * knows is looked up elsewhere (src/users/hostids.ts) and passed in, so the
 * rule is tested without the host's accounts.
 *
 * A home's owner uid is the only thing that keeps other uids out of it
 * (`default_permissions`), so an id must belong to that home alone: never
 * root, never the overflow id every unmapped file shows as, never another
 * home's (live, or retired when the home was deleted: processes and files of
 * that uid may still exist), never an account the host already has (its
 * processes would read the home, and the home's agents would act as it).
 */

/** Highest system account id (Debian's SYS_UID_MAX / SYS_GID_MAX): `force` never reaches below it. */
export const SYSTEM_ID_MAX = 999;

export type OwnerIdKind = 'uid' | 'gid';

export type OwnerConflictReason =
  /** 0: default_permissions does not stop root, and commands never run as root */
  | 'owner-root'
  /** 65534: nobody/nogroup, what every unmapped id shows as */
  | 'owner-overflow'
  /** another home's owner uid or gid */
  | 'owner-of-home'
  /** a deleted home's id (a tombstone in the state file) */
  | 'owner-retired'
  /** an account or group the host's user database already knows */
  | 'owner-host-account'
  /** outside the configured `owners` range */
  | 'owner-out-of-range';

export interface OwnerConflict {
  reason: OwnerConflictReason;
  kind: OwnerIdKind;
  id: number;
  /** owner-of-home: the home that has it */
  home?: string;
  /** owner-host-account: the host's name for it */
  account?: string;
  /** `force` may take it anyway (only out-of-range and host accounts above the system ids) */
  forceable: boolean;
  message: string;
}

/** Another home and the owner it has. */
export interface OwnerHolder {
  home: string;
  owner: Owner;
}

export interface OwnerAssignment {
  /** "tenant/key" */
  home: string;
  owner: Owner;
  /**
   * `new`: an owner being given now (`create --owner`): the range and the
   * tombstones apply. `existing`: one already in force (a state record, a
   * configuration entry) checked at start-up or reload: the range may have
   * moved since (a documented restart), and a home that shared its id with a
   * deleted one held it before the id was retired.
   */
  kind: 'new' | 'existing';
  /** the admin's explicit `--force` (recorded with the home, so start-up applies the same rule) */
  force: boolean;
}

export interface OwnerFacts {
  range: OwnerRange;
  /** every other home's owner (an entry for the assignment's own home is ignored) */
  holders: readonly OwnerHolder[];
  retired: ReadonlySet<number>;
  /** uid → account name, for the ids asked about, homesfs' own published owners left out */
  hostUsers: ReadonlyMap<number, string>;
  /** gid → group name, likewise */
  hostGroups: ReadonlyMap<number, string>;
}

export interface OwnerVerdict {
  /** what keeps the owner from being given: empty = allowed */
  refused: OwnerConflict[];
  /** what `force` took anyway (log it) */
  forced: OwnerConflict[];
}

function conflictsOf(kind: OwnerIdKind, id: number, a: OwnerAssignment, f: OwnerFacts): OwnerConflict[] {
  const out: OwnerConflict[] = [];
  const what = `${kind} ${id}`;
  const system = id <= SYSTEM_ID_MAX;
  if (id === 0) {
    out.push({ reason: 'owner-root', kind, id, forceable: false, message: `${what} is root: a home is never owned by root` });
    return out;
  }
  if (id === OVERFLOW_ID) {
    out.push({ reason: 'owner-overflow', kind, id, forceable: false, message: `${what} is the overflow id (nobody/nogroup) that every unmapped id shows as` });
    return out;
  }
  // No exception, not even for homes of one tenant that the configuration gives
  // one owner: a shared uid reads every such home, a shared gid every group bit.
  for (const h of f.holders) {
    if (h.home === a.home || (h.owner.uid !== id && h.owner.gid !== id)) continue;
    out.push({ reason: 'owner-of-home', kind, id, home: h.home, forceable: false, message: `${what} belongs to the home ${h.home}` });
  }
  if (a.kind === 'new' && f.retired.has(id)) {
    out.push({ reason: 'owner-retired', kind, id, forceable: false, message: `${what} belonged to a deleted home: ids are never reused` });
  }
  const account = kind === 'uid' ? f.hostUsers.get(id) : f.hostGroups.get(id);
  if (account !== undefined) {
    out.push({
      reason: 'owner-host-account',
      kind,
      id,
      account,
      forceable: !system,
      message: `${what} is the host's ${kind === 'uid' ? 'account' : 'group'} "${account}"${system ? ' (a system id)' : ''}`,
    });
  }
  if (a.kind === 'new' && (id < f.range.from || id > f.range.to)) {
    out.push({ reason: 'owner-out-of-range', kind, id, forceable: !system, message: `${what} is outside the owner range ${f.range.from}..${f.range.to}${system ? ' (a system id)' : ''}` });
  }
  return out;
}

/** Every reason the owner may not be given to the home, and what `force` takes anyway. */
export function checkOwner(a: OwnerAssignment, f: OwnerFacts): OwnerVerdict {
  const all = conflictsOf('uid', a.owner.uid, a, f);
  for (const c of conflictsOf('gid', a.owner.gid, a, f)) {
    // uid = gid: one line per fact, not two
    if (!all.some((x) => x.reason === c.reason && x.id === c.id && x.home === c.home && (c.reason !== 'owner-host-account' || x.kind === c.kind))) all.push(c);
  }
  const refused = all.filter((c) => !(a.force && c.forceable));
  const forced = all.filter((c) => a.force && c.forceable);
  return { refused, forced };
}

/** The error for a refused owner: every conflict in the message and in `details.conflicts`. */
export function ownerRefusal(home: string, owner: Owner, refused: readonly OwnerConflict[]): HomesError {
  const canForce = refused.every((c) => c.forceable);
  const message =
    `owner ${owner.uid}:${owner.gid} refused for ${home}: ${refused.map((c) => c.message).join('; ')}` +
    (canForce ? ' (--force takes it, for a home whose data already belong to that id)' : '');
  return new HomesError('INVALID_ARGUMENT', message, {
    reason: refused[0]!.reason,
    owner: { uid: owner.uid, gid: owner.gid },
    conflicts: refused.map(({ reason, kind, id, home: h, account }) => ({ reason, kind, id, ...(h !== undefined ? { home: h } : {}), ...(account !== undefined ? { account } : {}) })),
  });
}

/** An owner already in force, and where it is written (for the message). */
export interface ExistingOwner extends OwnerHolder {
  force: boolean;
  /** "state file", `configuration homes["t/k"].owner` */
  from: string;
}

/**
 * Owners in force that the rule refuses (start-up, reload, check-config): one
 * line per home, naming where the owner is written and every conflict.
 * `facts.holders` should hold every home's owner, these among them.
 */
export function existingOwnerProblems(owners: readonly ExistingOwner[], facts: OwnerFacts): string[] {
  const problems: string[] = [];
  for (const o of owners) {
    const v = checkOwner({ home: o.home, owner: o.owner, kind: 'existing', force: o.force }, facts);
    if (v.refused.length > 0) problems.push(`${o.home} (${o.from}): owner ${o.owner.uid}:${o.owner.gid}: ${v.refused.map((c) => c.message).join('; ')}`);
  }
  return problems;
}

/** The configuration's `homes` entries with an owner, as owners in force. */
export function configOwners(homes: Readonly<Record<string, { owner?: Owner | undefined }>>): ExistingOwner[] {
  return Object.entries(homes).flatMap(([home, e]) => (e.owner ? [{ home, owner: { uid: e.owner.uid, gid: e.owner.gid }, force: false, from: `configuration homes["${home}"].owner` }] : []));
}
