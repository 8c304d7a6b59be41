import { ABI } from '../abi.js';
import { HomesError } from '../errors.js';

/** Linux NAME_MAX (native/src/abi.h): a longer component could never be created on the backing side. */
export const NAME_MAX_BYTES: number = ABI.NAME_MAX;

const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A name component inside a home. Validated before it ever becomes part of a
 * backing path: `..` or an embedded `/` would walk out of the home, NUL would
 * truncate the path in the kernel, and an empty name would address the parent.
 */
export function checkComponent(name: string, maxBytes = NAME_MAX_BYTES): void {
  if (name.length === 0) throw new HomesError('INVALID_NAME', 'empty name component');
  if (name === '.' || name === '..') throw new HomesError('INVALID_NAME', `name component "${name}" is not allowed`);
  if (name.includes('/')) throw new HomesError('INVALID_NAME', 'name component contains "/"');
  if (name.includes('\0')) throw new HomesError('INVALID_NAME', 'name component contains NUL');
  // A lone surrogate cannot come from UTF-8 decoding, but a string built in JS
  // can hold one and would be re-encoded as U+FFFD: a different name.
  if (!name.isWellFormed()) throw new HomesError('NOT_UTF8_NAME', 'name component is not valid Unicode');
  const bytes = Buffer.byteLength(name, 'utf8');
  if (bytes > maxBytes) {
    throw new HomesError('NAME_TOO_LONG', `name component is ${bytes} bytes, the limit is ${maxBytes}`, { bytes, limit: maxBytes });
  }
}

/** True when a raw backing name (from readdir with buffer encoding) is servable. */
export function decodeBackingName(raw: Buffer): string | null {
  try {
    const name = fatalUtf8.decode(raw);
    checkComponent(name);
    return name;
  } catch {
    return null;
  }
}

const SEGMENT_MAX_BYTES = 128;

/**
 * Tenant names, project names and logins become the two top levels of the tree,
 * owned by the daemon. They are held to a stricter rule than names inside a home
 * (per-scope-home §5): no `\`, no control characters, no leading dot (which
 * also keeps daemon-internal names such as `.homesfs-selfcheck` free), bounded
 * length.
 */
export function checkSegment(kind: 'tenant' | 'project' | 'login' | 'key', value: string): void {
  checkComponent(value, SEGMENT_MAX_BYTES + 8);
  if (Buffer.byteLength(value, 'utf8') > (kind === 'key' ? SEGMENT_MAX_BYTES + 6 : SEGMENT_MAX_BYTES)) {
    throw new HomesError('NAME_TOO_LONG', `${kind} "${value}" is longer than ${SEGMENT_MAX_BYTES} bytes`);
  }
  if (value.includes('\\')) throw new HomesError('INVALID_NAME', `${kind} may not contain "\\"`);
  // C0/C1 controls and bidi overrides: a name an admin reads in a table must be the name it is.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/.test(value)) {
    throw new HomesError('INVALID_NAME', `${kind} may not contain control or bidi-override characters`);
  }
  if (value.startsWith('.')) throw new HomesError('INVALID_NAME', `${kind} may not begin with "."`);
}

export type HomeScope = 'project' | 'tenant' | 'user';

export interface KeyInfo {
  scope: HomeScope;
  /** project name for project homes, login for user homes */
  subject: string | null;
}

export const TENANT_KEY = '_tenant';
/**
 * A deleted home is first renamed to this (through the mount), then removed.
 * Never a valid key; a path through it is a working directory (or an open
 * directory) left inside a deleted home.
 */
export const TRASH_PREFIX = '.homesfs-trash-';
export const USER_KEY_PREFIX = '_user_';

/**
 * The key vocabulary of the per-scope-home design. A project name may not begin
 * with `_`, so no project can ever be resolved onto a shared or user home.
 */
export function classifyKey(key: string): KeyInfo {
  checkSegment('key', key);
  if (key === TENANT_KEY) return { scope: 'tenant', subject: null };
  if (key.startsWith(USER_KEY_PREFIX)) {
    const login = key.slice(USER_KEY_PREFIX.length);
    checkSegment('login', login);
    return { scope: 'user', subject: login };
  }
  if (key.startsWith('_')) throw new HomesError('INVALID_NAME', `home key "${key}" is neither a project name nor a reserved key`);
  return { scope: 'project', subject: key };
}

/** The directory name of a home, derived from the scope enum, never from setting text. */
export function keyFor(scope: HomeScope, subject: string | null): string {
  switch (scope) {
    case 'tenant':
      return TENANT_KEY;
    case 'user':
      if (subject === null) throw new HomesError('INVALID_ARGUMENT', 'a user home needs a login');
      checkSegment('login', subject);
      return USER_KEY_PREFIX + subject;
    case 'project':
      if (subject === null) throw new HomesError('INVALID_ARGUMENT', 'a project home needs a project name');
      checkSegment('project', subject);
      if (subject.startsWith('_')) throw new HomesError('INVALID_NAME', `project name "${subject}" may not begin with "_"`);
      return subject;
  }
}

/**
 * The daemon's own directory under the backing root (state, lock). No tenant
 * can take the name: tenant names may not begin with ".", and the backing scan
 * skips it.
 */
export const DAEMON_DIR = '.homesfs';
