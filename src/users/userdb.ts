import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, readlink, rename, symlink, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../log.js';
import { publishable, USER_NAME_RE, type OwnerRecord } from './names.js';

/**
 * Owner names where the host's NSS finds them: systemd's userdb drop-in
 * directory (`/run/userdb`, read by nss-systemd even without systemd-userdbd).
 * Per owner: `<name>.user` (a JSON user record) with the `<uid>.user` symlink
 * nss-systemd uses for lookups by uid, and the same pair for the group.
 *
 * The directory may hold records of others (and of other homesfs instances):
 * a record is ours only if its `io.homesfs.mount` names our mount, and only
 * ours are ever replaced or removed.
 */
export class UserDb {
  /** "tenant/key" → the record published for it */
  private readonly published = new Map<string, OwnerRecord>();
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    readonly dir: string,
    private readonly mount: string,
    private readonly log: Logger,
  ) {}

  /** One change at a time: a rename's remove and publish never interleave with another's. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn, fn);
    this.chain = next.catch(() => undefined);
    return next;
  }

  private userJson(r: OwnerRecord): string {
    return (
      JSON.stringify({
        userName: r.name,
        uid: r.uid,
        gid: r.gid,
        realName: `homesfs ${r.home}`,
        homeDirectory: r.dir,
        shell: '/usr/sbin/nologin',
        disposition: 'regular',
        'io.homesfs': { mount: this.mount, home: r.home },
      }) + '\n'
    );
  }

  private groupJson(r: OwnerRecord): string {
    return JSON.stringify({ groupName: r.name, gid: r.gid, 'io.homesfs': { mount: this.mount, home: r.home } }) + '\n';
  }

  /** Whose is `<file>`: our mount's, someone else's, or absent. */
  private async ownerOfFile(file: string): Promise<'ours' | 'foreign' | 'absent'> {
    let text: string;
    try {
      const st = await lstat(join(this.dir, file));
      if (!st.isFile()) return 'foreign';
      text = await readFile(join(this.dir, file), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
      throw err;
    }
    try {
      const j = JSON.parse(text) as { 'io.homesfs'?: { mount?: unknown } };
      return j['io.homesfs']?.mount === this.mount ? 'ours' : 'foreign';
    } catch {
      return 'foreign';
    }
  }

  /** Replace `name` atomically (a temp name in the same directory, then rename). */
  private async put(name: string, content: string | { link: string }): Promise<void> {
    const tmp = join(this.dir, `.homesfs-${randomBytes(6).toString('hex')}`);
    if (typeof content === 'string') await writeFile(tmp, content, { mode: 0o644 });
    else await symlink(content.link, tmp);
    try {
      await rename(tmp, join(this.dir, name));
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
  }

  /** Remove `link` if it is a symlink to `target` (someone else's link stays). */
  private async unlinkIfPointsTo(link: string, target: string): Promise<void> {
    try {
      if ((await readlink(join(this.dir, link))) === target) await unlink(join(this.dir, link));
    } catch {
      // absent or not a link: not ours
    }
  }

  publish(r: OwnerRecord): Promise<boolean> {
    return this.serial(() => this.publishNow(r));
  }

  private async publishNow(r: OwnerRecord): Promise<boolean> {
    if (!USER_NAME_RE.test(r.name) || !publishable(r.uid, r.gid)) {
      this.log.debug({ home: r.home, uid: r.uid }, 'owner not published (system id)');
      return false;
    }
    const before = this.published.get(r.home);
    if (before && before.name === r.name && before.uid === r.uid && before.gid === r.gid && before.dir === r.dir) return true;
    if (before) await this.removeNow(r.home);
    await mkdir(this.dir, { recursive: true, mode: 0o755 });
    for (const f of [`${r.name}.user`, `${r.name}.group`]) {
      if ((await this.ownerOfFile(f)) === 'foreign') {
        this.log.warn({ home: r.home, file: join(this.dir, f) }, 'owner name not published: the record belongs to someone else');
        return false;
      }
    }
    for (const [link, target] of [[`${r.uid}.user`, `${r.name}.user`], [`${r.gid}.group`, `${r.name}.group`]] as const) {
      const existing = await readlink(join(this.dir, link)).catch(() => null);
      if (existing !== null && existing !== target && (await this.ownerOfFile(existing.replace(/^.*\//, ''))) !== 'ours') {
        this.log.warn({ home: r.home, uid: r.uid, file: join(this.dir, link) }, 'owner name not published: the id already has a record');
        return false;
      }
    }
    await this.put(`${r.name}.user`, this.userJson(r));
    await this.put(`${r.name}.group`, this.groupJson(r));
    await this.put(`${r.uid}.user`, { link: `${r.name}.user` });
    await this.put(`${r.gid}.group`, { link: `${r.name}.group` });
    this.published.set(r.home, r);
    this.log.debug({ home: r.home, name: r.name, uid: r.uid }, 'owner name published');
    return true;
  }

  remove(home: string): Promise<void> {
    return this.serial(() => this.removeNow(home));
  }

  private async removeNow(home: string): Promise<void> {
    const r = this.published.get(home);
    if (!r) return;
    this.published.delete(home);
    await this.removeFiles(r.name, r.uid, r.gid);
    this.log.debug({ home, name: r.name }, 'owner name removed');
  }

  private async removeFiles(name: string, uid: number, gid: number): Promise<void> {
    await this.unlinkIfPointsTo(`${uid}.user`, `${name}.user`);
    await this.unlinkIfPointsTo(`${gid}.group`, `${name}.group`);
    for (const f of [`${name}.user`, `${name}.group`]) {
      if ((await this.ownerOfFile(f)) === 'ours') await unlink(join(this.dir, f)).catch(() => undefined);
    }
  }

  /**
   * At start: publish `records` and remove every record of our mount that is
   * not among them (left by an earlier run that did not stop cleanly).
   */
  reconcile(records: OwnerRecord[]): Promise<void> {
    return this.serial(async () => {
      const keep = new Set(records.map((r) => r.name));
      let entries: string[] = [];
      try {
        entries = await readdir(this.dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
      for (const f of entries) {
        const m = /^(.+)\.user$/.exec(f);
        if (!m || /^[0-9]+$/.test(m[1]!) || keep.has(m[1]!)) continue;
        if ((await this.ownerOfFile(f)) !== 'ours') continue;
        const rec = JSON.parse(await readFile(join(this.dir, f), 'utf8')) as { uid?: number; gid?: number };
        await this.removeFiles(m[1]!, Number(rec.uid), Number(rec.gid));
        this.log.info({ name: m[1] }, 'stale owner name removed');
      }
      for (const r of records) {
        await this.publishNow(r).catch((err: Error) => this.log.warn({ home: r.home, err: err.message }, 'owner name not published'));
      }
    });
  }

  /** At a clean stop: the homes leave with the mount, so do their names. */
  removeAll(): Promise<void> {
    return this.serial(async () => {
      for (const home of [...this.published.keys()]) await this.removeNow(home).catch(() => undefined);
    });
  }
}
