import { createHash } from 'node:crypto';

/**
 * The user name of a home's owner. PURE. Derived from tenant and key so a
 * human can tell whose process it is (`acme-web-1f0c9a2e`), with a hash of the
 * exact "tenant/key" so two homes never share a name, however their names
 * fold: lowercase letters, digits, `_` and `-`, starting with a letter, at
 * most 31 characters (the portable user-name rules of useradd and systemd).
 */
export function ownerUserName(tenant: string, key: string): string {
  const fold = (s: string, max: number) =>
    s
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '_')
      .replace(/^_+|_+$/g, '')
      .slice(0, max)
      .replace(/_+$/, '') || 'x';
  const hash = createHash('sha256').update(`${tenant}/${key}`).digest('hex').slice(0, 8);
  const name = `${fold(tenant, 8)}-${fold(key, 12)}-${hash}`;
  return /^[a-z]/.test(name) ? name : `h${name}`;
}

/** Valid as a user name for NSS and shadow-utils alike (the form ownerUserName produces). */
export const USER_NAME_RE = /^[a-z_][a-z0-9_-]{0,30}$/;

export interface OwnerRecord {
  name: string;
  uid: number;
  gid: number;
  /** "tenant/key" */
  home: string;
  /** the home directory written into the record */
  dir: string;
}

/** `/etc/passwd` line: no password, no login shell. */
export function passwdLine(r: OwnerRecord): string {
  return `${r.name}:x:${r.uid}:${r.gid}:homesfs ${gecos(r.home)}:${r.dir}:/usr/sbin/nologin`;
}

/** `/etc/group` line: the owner's own group, no members besides its primary user. */
export function groupLine(r: OwnerRecord): string {
  return `${r.name}:x:${r.gid}:`;
}

/** ':' and newlines would break the line format; commas are gecos field separators. */
function gecos(s: string): string {
  return s.replace(/[:,\n\r\\]/g, '_');
}

/** uids never published: root, system accounts and the overflow id. */
export function publishable(uid: number, gid: number): boolean {
  return uid >= 1000 && gid >= 1000 && uid !== 65534 && gid !== 65534;
}
