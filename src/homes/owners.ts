import type { Owner } from '../backing/store.js';
import type { LoadedConfig } from '../config/load.js';
import type { OwnerArg } from '../control/api.js';
import { HomesError } from '../errors.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import { checkOwner, existingOwnerProblems, ownerRefusal, type ExistingOwner, type OwnerAssignment, type OwnerHolder, type OwnerVerdict } from '../scope/owner-check.js';
import { allocateOwner } from '../scope/owners.js';
import { ownerUserName } from '../users/names.js';
import { withoutOwn, type HostIds } from '../users/hostids.js';
import { HomeConcern } from './core.js';

/**
 * Owners of homes: an owner uid (and gid) belongs to one home, never 0,
 * 65534, a retired id or an account the host knows. A new home's owner is
 * given (and checked) or allocated from the configured range; owners already
 * in force are checked at start and on reload.
 */
export class HomeOwners extends HomeConcern {
  /** Owner decisions one at a time: a host lookup awaits between choosing an id and recording it. */
  private ownerChain: Promise<unknown> = Promise.resolve();

  /** uids and gids already given out (gid = uid for allocated owners, but an explicit owner may differ), and retired ones. */
  private usedIds(): number[] {
    const ids = Object.values(this.state.state.homes).flatMap((h) => [h.owner.uid, h.owner.gid]);
    for (const h of Object.values(this.config.homes)) if (h.owner) ids.push(h.owner.uid, h.owner.gid);
    ids.push(...this.state.state.owners.retired);
    return ids;
  }

  /**
   * Where allocation continues: the recorded mark, or (a state file written
   * before there was one) the highest id of the range already in use.
   */
  private highWater(): number | undefined {
    const { from, to } = this.config.owners;
    let mark = this.state.state.owners.highWater;
    for (const id of this.usedIds()) if (id >= from && id <= to && (mark === undefined || id > mark)) mark = id;
    return mark;
  }

  /**
   * Every home's owner as far as `cfgHomes` and the state file say (state
   * records win, as in ownerOf), and, with `live`, the homes loaded now (homes
   * found in the backing tree without a record keep their directory's owner).
   */
  private async ownerHolders(cfgHomes: LoadedConfig['config']['homes'], live: boolean): Promise<OwnerHolder[]> {
    const out = new Map<string, OwnerHolder>();
    if (live) {
      for (const p of this.ctx.knownHomes()) {
        const hs = await p.catch(() => null);
        if (hs) out.set(hs.backing.id, { home: hs.backing.id, owner: { ...hs.backing.owner } });
      }
    }
    for (const [id, e] of Object.entries(cfgHomes)) if (e.owner) out.set(id, { home: id, owner: { ...e.owner } });
    for (const [id, r] of Object.entries(this.state.state.homes)) out.set(id, { home: id, owner: { ...r.owner } });
    return [...out.values()];
  }

  /** The host's accounts and groups among these ids, the records homesfs publishes for its own homes left out. */
  private async hostAccounts(owners: readonly Owner[], homes: ReadonlyArray<{ home: string; owner: Owner }>): Promise<HostIds> {
    let found: HostIds;
    try {
      found = await this.core.hostIds(
        owners.map((o) => o.uid),
        owners.map((o) => o.gid),
      );
    } catch (err) {
      throw new HomesError('IO', `the host's user database could not be asked whether the owner is taken: ${(err as Error).message}`);
    }
    const own = homes.map((h) => {
      const slash = h.home.indexOf('/');
      return { name: ownerUserName(h.home.slice(0, slash), h.home.slice(slash + 1)), uid: h.owner.uid, gid: h.owner.gid };
    });
    return withoutOwn(found, own);
  }

  /** Refuse an owner (INVALID_ARGUMENT naming every conflict), or log what `force` took. */
  private async vetOwner(a: OwnerAssignment, holders: OwnerHolder[]): Promise<OwnerVerdict> {
    const host = await this.hostAccounts([a.owner], [...holders, a]);
    const v = checkOwner(a, { range: this.config.owners, holders, retired: new Set(this.state.state.owners.retired), hostUsers: host.users, hostGroups: host.groups });
    if (v.refused.length > 0) {
      this.log.warn({ home: a.home, owner: a.owner, conflicts: v.refused.map((c) => c.message) }, 'owner refused');
      throw ownerRefusal(a.home, a.owner, v.refused);
    }
    if (v.forced.length > 0) this.log.warn({ home: a.home, owner: a.owner, forced: v.forced.map((c) => c.message) }, 'owner taken with --force');
    return v;
  }

  /**
   * A new owner from the range: the allocator's next ids, asked of the host in
   * batches, the first one the host does not know (as uid and as gid).
   */
  private async allocateChecked(holders: OwnerHolder[]): Promise<Owner> {
    const taken = new Set(this.usedIds());
    for (const h of holders) taken.add(h.owner.uid).add(h.owner.gid);
    let mark = this.highWater();
    let skipped = 0;
    for (let round = 0; round < 64; round++) {
      const batch: Owner[] = [];
      for (let i = 0; i < 16; i++) {
        let o: Owner;
        try {
          o = allocateOwner(this.config.owners, taken, mark);
        } catch (err) {
          if (batch.length === 0) throw err;
          break;
        }
        batch.push(o);
        taken.add(o.uid);
        mark = o.uid;
      }
      const host = await this.hostAccounts(batch, holders);
      const free = batch.find((o) => !host.users.has(o.uid) && !host.groups.has(o.gid));
      skipped += free ? batch.indexOf(free) : batch.length;
      if (free) {
        if (skipped > 0) this.log.info({ owner: free, skipped }, 'owner ids the host already knows were skipped');
        return free;
      }
    }
    throw new HomesError('INVALID_ARGUMENT', `the next ${skipped} ids of the owner range ${this.config.owners.from}..${this.config.owners.to} are all host accounts or groups: move the range`, {
      reason: 'owner-range-exhausted',
      skipped,
    });
  }

  /**
   * Owners already in force (state records, configuration entries) that the
   * owner rule refuses: one line per problem, empty when all is well. Checked
   * at start-up (exit code 9) and on reload with the new configuration.
   * Records of homes found without one (`ownerFound`) are what the backing
   * tree says, not an assignment, and are not checked.
   */
  async ownerProblems(loaded: LoadedConfig = this.loaded): Promise<string[]> {
    const cfgHomes = loaded.config.homes;
    const records = this.state.state.homes;
    const holders = (await this.ownerHolders(cfgHomes, false)).filter((h) => !(Object.hasOwn(records, h.home) && records[h.home]!.ownerFound));
    const owners: ExistingOwner[] = holders.map((h) => {
      const r = Object.hasOwn(records, h.home) ? records[h.home]! : undefined;
      return { ...h, force: r?.ownerForced === true, from: r ? 'state file' : `configuration homes["${h.home}"].owner` };
    });
    if (owners.length === 0) return [];
    const host = await this.hostAccounts(
      owners.map((a) => a.owner),
      holders,
    );
    return existingOwnerProblems(owners, { range: loaded.config.owners, holders, retired: new Set(this.state.state.owners.retired), hostUsers: host.users, hostGroups: host.groups });
  }

  /** The new home's owner, checked (or allocated) and recorded: one decision at a time. */
  private async decideOwner(ref: HomeRef, args: { profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<{ owner: Owner; forced: boolean }> {
    const id = homeId(ref);
    // Another create of this home may have recorded it while this one waited its turn.
    if (await this.ctx.store.homeExists(ref)) throw new HomesError('EXISTS', `home ${id} exists`);
    const holders = await this.ownerHolders(this.config.homes, true);
    const pinned = this.core.ownerOf(ref);
    const given = args.owner ?? pinned;
    let forced = false;
    if (args.owner) {
      const v = await this.vetOwner({ home: id, owner: args.owner, kind: 'new', force: args.force === true }, holders);
      forced = v.forced.length > 0;
    } else if (pinned) {
      const rec = Object.hasOwn(this.state.state.homes, id) ? this.state.state.homes[id] : undefined;
      await this.vetOwner({ home: id, owner: pinned, kind: 'existing', force: rec?.ownerForced === true }, holders);
    }
    const owner = given ?? (await this.allocateChecked(holders));
    await this.state.update((s) => {
      if (!given) s.owners.highWater = Math.max(s.owners.highWater ?? 0, owner.uid);
      s.homes[id] = {
        owner: { uid: owner.uid, gid: owner.gid },
        ...(forced ? { ownerForced: true as const } : {}),
        ...(args.profile !== undefined ? { profile: args.profile } : {}),
        ...(args.budget !== undefined ? { budget: args.budget } : {}),
        createdAt: new Date().toISOString(),
      };
    });
    return { owner, forced };
  }

  /** The new home's owner, checked (or allocated) and recorded, decided in turn with every other create. */
  decide(ref: HomeRef, args: { profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<{ owner: Owner; forced: boolean }> {
    const decided = this.ownerChain.then(() => this.decideOwner(ref, args));
    this.ownerChain = decided.catch(() => undefined);
    return decided;
  }
}
