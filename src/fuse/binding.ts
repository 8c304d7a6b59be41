import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { abiMismatches } from '../abi.js';
import { attachAddon, type FuseClass } from './addon.js';
import { FuseSession, type SessionOptions } from './session.js';
import type { AddonRaw, WriteHandler } from '../addon-raw.js';
import type { Serve } from './ops.js';

// The types live beside what implements them (addon.ts, session.ts), so this
// loader depends on them and nothing of them on it.
export type { FastPathNative, FuseClass } from './addon.js';
export type { FuseInstance } from './session.js';

export type { WriteHandler };

export class NativeBindingError extends Error {}

/** Where the addons are: native/addon/ of this package (scripts/build-native.mjs installs them there). */
export function addonPath(name: 'homesfs.node' | 'scandir.node'): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../native/addon', name);
}

/**
 * Load our addon (native/src: the FUSE session and everything it answers
 * from) and refuse one built from other sources than this daemon.
 */
export function loadFuse(): FuseClass {
  const require = createRequire(import.meta.url);
  const at = addonPath('homesfs.node');
  let raw: AddonRaw;
  try {
    raw = require(at) as AddonRaw;
  } catch (err) {
    throw new NativeBindingError(
      `the native addon cannot be loaded from ${at} (${(err as Error).message}); install libfuse2 and libfuse-dev, then run "npm ci" (it builds the addon) or "node scripts/build-native.mjs"`,
    );
  }
  const mismatches = abiMismatches(raw.ABI);
  if (mismatches.length > 0) {
    throw new NativeBindingError(
      `the native addon at ${at} was built from other sources than this daemon (${mismatches.slice(0, 3).join('; ')}); rebuild it: node scripts/build-native.mjs (or npm ci)`,
    );
  }
  const Fuse = class {
    static native = raw;
    static BINDING_PATH = at;
    constructor(mnt: string, serve: Serve, opts: SessionOptions) {
      return new FuseSession(raw, mnt, serve, opts, (m, cb) => (Fuse as unknown as FuseClass).unmount(m, cb));
    }
  };
  attachAddon(Fuse as unknown as Record<string, unknown>, raw);
  return Fuse as unknown as FuseClass;
}
