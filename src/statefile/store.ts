import { constants as fsConstants } from 'node:fs';
import { mkdir, open, readdir, rename, unlink } from 'node:fs/promises';
import path from 'node:path';
import { emptyState, stateIssues, type State } from './schema.js';

export { emptyState, homeRef, STATE_VERSION, type HomeRecord, type OwnerRecord, type State, type TenantSettings } from './schema.js';

/** A state file larger than this is not ours: refuse it rather than read it into memory. */
export const MAX_STATE_BYTES = 64 * 1024 * 1024;

/**
 * The state file cannot be used: unreadable, not JSON, or not a valid state.
 * The daemon refuses to start on it rather than serve with wrong limits or
 * owners. Every problem is listed with its path.
 */
export class StateError extends Error {
  readonly issues: string[];
  readonly path: string;

  constructor(file: string, issues: string[], options?: { cause?: unknown }) {
    super(`invalid state file ${file}:\n  ${issues.join('\n  ')}`, options);
    this.name = 'StateError';
    this.path = file;
    this.issues = issues;
  }
}

/**
 * A copy whose records have no prototype: a tenant or project called
 * "constructor" or "__proto__" is then just a key, and `draft.settings[t] ??= …`
 * can never reach Object.prototype.
 */
function copyState(s: State): State {
  const rec = <T, U>(r: Record<string, T>, f: (v: T) => U): Record<string, U> => {
    const out = Object.create(null) as Record<string, U>;
    for (const [k, v] of Object.entries(r)) out[k] = f(v);
    return out;
  };
  return {
    version: s.version,
    settings: rec(s.settings, (t) => ({
      ...(t.tenantDefault !== undefined ? { tenantDefault: t.tenantDefault } : {}),
      projects: rec(t.projects, (v) => v),
      users: rec(t.users, (v) => v),
    })),
    homes: rec(s.homes, (h) => ({
      owner: { uid: h.owner.uid, gid: h.owner.gid },
      ...(h.ownerForced ? { ownerForced: true as const } : {}),
      ...(h.ownerFound ? { ownerFound: true as const } : {}),
      ...(h.profile !== undefined ? { profile: h.profile } : {}),
      ...(h.budget !== undefined ? { budget: h.budget } : {}),
      ...(h.maxInodes !== undefined ? { maxInodes: h.maxInodes } : {}),
      ...(h.maxFileBytes !== undefined ? { maxFileBytes: h.maxFileBytes } : {}),
      ...(h.softBytes !== undefined ? { softBytes: h.softBytes } : {}),
      ...(h.softInodes !== undefined ? { softInodes: h.softInodes } : {}),
      createdAt: h.createdAt,
    })),
    ...(s.forwards !== undefined ? { forwards: rec(s.forwards, (f) => ({ to: f.to, at: f.at })) } : {}),
    owners: {
      ...(s.owners.highWater !== undefined ? { highWater: s.owners.highWater } : {}),
      retired: [...s.owners.retired],
    },
    ...(s.tenants !== undefined ? { tenants: rec(s.tenants, (t) => ({ ...(t.maxBytes !== undefined ? { maxBytes: t.maxBytes } : {}) })) } : {}),
  };
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as Record<string, unknown>)) deepFreeze(v);
  }
  return o;
}

function errCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}

/** Validate a state file's text; StateError with every issue otherwise. */
export function parseStateText(file: string, text: string): State {
  let input: unknown;
  try {
    input = JSON.parse(text);
  } catch (err) {
    throw new StateError(file, [`(root): not JSON: ${err instanceof Error ? err.message : String(err)}`], { cause: err });
  }
  const { state, issues } = stateIssues(input);
  if (state === null) throw new StateError(file, issues);
  return copyState(state);
}

/**
 * The daemon's persistent state: home-scope settings, home owners and per-home
 * overrides. One process owns one state file.
 *
 * Writes are atomic and durable: `<path>.tmp-<pid>-<n>` (mode 0600) is written
 * and fsynced, renamed over `<path>`, and the directory is fsynced. The
 * in-memory state changes only once the new file is in place; updates are
 * serialised, so none loses another's change.
 */
export class StateStore {
  readonly path: string;
  #state: State;
  #tail: Promise<unknown> = Promise.resolve();
  #seq = 0;

  private constructor(file: string, state: State) {
    this.path = file;
    this.#state = deepFreeze(copyState(state));
  }

  /**
   * Load the state file. A missing file is an empty state (the directory is
   * created, 0700, on the first update). Leftover temp files of a crashed
   * write are removed; they are never promoted, since they may be half
   * written. Anything unreadable, not JSON, or invalid is a StateError.
   */
  static async load(file: string): Promise<StateStore> {
    const abs = path.resolve(file);
    await removeLeftovers(abs);
    let text: string;
    try {
      text = await readStateFile(abs);
    } catch (err) {
      if (err instanceof StateError) throw err;
      if (errCode(err) === 'ENOENT') return new StateStore(abs, emptyState());
      throw new StateError(abs, [`(file): cannot read: ${err instanceof Error ? err.message : String(err)}`], { cause: err });
    }
    return new StateStore(abs, parseStateText(abs, text));
  }

  /**
   * The state file as it is now, read only (no leftovers removed, nothing
   * written: another daemon may hold the file); null if it cannot be read or
   * parsed. For guesses made ahead of `load`, never instead of it.
   */
  static async peek(file: string): Promise<State | null> {
    try {
      return parseStateText(path.resolve(file), await readStateFile(path.resolve(file)));
    } catch {
      return null;
    }
  }

  /** The current state, deeply frozen: change it through `update` only. */
  get state(): Readonly<State> {
    return this.#state;
  }

  /**
   * Apply `mutator` to a deep copy of the state, validate the result, write it
   * atomically, and only then make it the current state. A mutator that
   * throws, an invalid result (StateError) or a failed write changes nothing
   * and rejects. The mutator must be synchronous.
   */
  update(mutator: (draft: State) => void): Promise<void> {
    const run = async (): Promise<void> => {
      const draft = copyState(this.#state);
      const ret: unknown = mutator(draft);
      if (typeof ret === 'object' && ret !== null && typeof (ret as { then?: unknown }).then === 'function') {
        throw new TypeError('StateStore.update: the mutator must be synchronous (it returned a promise)');
      }
      const { state, issues } = stateIssues(draft);
      if (state === null) throw new StateError(this.path, issues);
      const next = copyState(state);
      const committed = await this.#write(`${JSON.stringify(next, null, 2)}\n`);
      // The file now holds `next`: memory follows it even if the directory
      // fsync failed afterwards, so the two never disagree.
      this.#state = deepFreeze(next);
      if (committed !== null) throw committed;
    };
    const result = this.#tail.then(run, run);
    this.#tail = result.catch(() => undefined);
    return result;
  }

  /** Resolves once every update queued so far has settled. */
  async flush(): Promise<void> {
    await this.#tail;
  }

  /**
   * Write `text` to a fresh temp file, fsync, rename over the state file. Throws
   * (temp file removed) if anything up to the rename fails; returns the error
   * of the directory fsync, which comes after the point of no return.
   */
  async #write(text: string): Promise<Error | null> {
    const dir = path.dirname(this.path);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const tmp = `${this.path}.tmp-${process.pid}-${this.#seq++}`;
    try {
      // 'wx': O_CREAT|O_EXCL, never through an existing file or symlink.
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.chmod(0o600); // whatever the umask
        await fh.writeFile(text, 'utf8');
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, this.path);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
    try {
      await syncDir(dir);
      return null;
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err));
    }
  }
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY);
  try {
    await fh.sync();
  } catch (err) {
    // Some filesystems cannot fsync a directory; the rename is then as durable as they get.
    const code = errCode(err);
    if (code !== 'EINVAL' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw err;
  } finally {
    await fh.close();
  }
}

/** Read the state file; O_NONBLOCK so a FIFO planted at the path cannot hang start-up. */
async function readStateFile(file: string): Promise<string> {
  const fh = await open(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new StateError(file, ['(file): not a regular file']);
    if (st.size > MAX_STATE_BYTES) throw new StateError(file, [`(file): ${st.size} bytes, more than the ${MAX_STATE_BYTES} a state file may have`]);
    return await fh.readFile('utf8');
  } finally {
    await fh.close();
  }
}

/** Remove `<file>.tmp-*` left by a write that crashed before its rename. */
async function removeLeftovers(file: string): Promise<void> {
  const prefix = `${path.basename(file)}.tmp-`;
  let names: string[];
  try {
    names = await readdir(path.dirname(file));
  } catch (err) {
    if (errCode(err) === 'ENOENT') return;
    throw new StateError(file, [`(file): cannot list its directory: ${err instanceof Error ? err.message : String(err)}`], { cause: err });
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    try {
      await unlink(path.join(path.dirname(file), name));
    } catch (err) {
      // Left in place, it could collide with a temp name of ours (a container's pid repeats).
      if (errCode(err) !== 'ENOENT') {
        throw new StateError(file, [`(file): cannot remove the leftover temp file ${name}: ${err instanceof Error ? err.message : String(err)}`], {
          cause: err,
        });
      }
    }
  }
}
