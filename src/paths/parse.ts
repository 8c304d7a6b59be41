import { HomesError } from '../errors.js';
import { checkComponent, checkSegment, classifyKey, TRASH_PREFIX } from './names.js';

export interface HomeRef {
  tenant: string;
  key: string;
}

export type VirtualPath =
  | { kind: 'root' }
  | { kind: 'tenant'; tenant: string }
  /** rel is the list of validated components below the home root ([] = the home itself) */
  | { kind: 'home'; home: HomeRef; rel: readonly string[] };

export function homeId(home: HomeRef): string {
  return `${home.tenant}/${home.key}`;
}

/**
 * Turn a path from the kernel (always absolute, `/`-separated, no `.`/`..`
 * after the kernel's own resolution) into a route. Every component is checked
 * here, before anything touches the backing tree: a path that reaches the
 * backing store is a list of safe single components below one home.
 */
export function parseVirtualPath(path: string): VirtualPath {
  if (!path.startsWith('/')) throw new HomesError('INVALID_NAME', 'path is not absolute');
  if (path === '/') return { kind: 'root' };
  const parts = path.slice(1).split('/');
  // A trailing slash would leave an empty last component: the kernel never sends one.
  const [tenant, key, ...rel] = parts;
  if (tenant === undefined) return { kind: 'root' };
  checkSegment('tenant', tenant);
  if (key === undefined) return { kind: 'tenant', tenant };
  // What is left of a deleted home, reached from a working directory still
  // inside it (the session keeps the trash name it was moved to): gone, not malformed.
  if (key.startsWith(TRASH_PREFIX)) throw new HomesError('NOT_FOUND', 'the home was deleted');
  classifyKey(key);
  for (const c of rel) checkComponent(c);
  return { kind: 'home', home: { tenant, key }, rel };
}

/** Parent components and the last name of a path inside a home. */
export function splitLast(rel: readonly string[]): { dir: readonly string[]; name: string } | null {
  if (rel.length === 0) return null;
  return { dir: rel.slice(0, -1), name: rel[rel.length - 1]! };
}
