import { errnoName } from '../errors.js';
import type { FuseClass } from './binding.js';

/** The daemon's descriptor limit as set at start (shown by `status`). */
export interface NofileReport {
  /** limits.nofile, or null: the hard limit */
  configured: number | null;
  soft: number;
  hard: number;
  /** kept for the daemon's own work, never given to open files */
  reserve: number;
  /** what the open files of all homes may hold together (before each home's own directory descriptor) */
  forHandles: number;
  /** set when the configured value could not be had */
  warning?: string;
}

/** A kernel never allows more than fs.nr_open (2^20 by default) whatever "unlimited" says. */
const UNLIMITED = 1 << 20;

/**
 * Set RLIMIT_NOFILE from the configuration (Node has no setrlimit: the addon
 * does it, calls.c). Raising the hard limit needs CAP_SYS_RESOURCE; without it
 * the soft limit goes as high as the hard one allows and the shortfall is
 * reported, never hidden: the open-file guard is computed from what is in force.
 */
export function applyNofile(Fuse: FuseClass, configured: number | undefined, reserve: number): NofileReport {
  const cur = Fuse.nofile();
  const hardNow = Number.isFinite(cur.hard) ? cur.hard : UNLIMITED;
  const want = configured ?? hardNow;
  let r = Fuse.nofile(want, Math.max(hardNow, want));
  let warning: string | undefined;
  if (r.res < 0) {
    const why = errnoName(-r.res);
    r = Fuse.nofile(Math.min(want, hardNow), 0);
    warning = `limits.nofile ${want} is above the hard limit ${hardNow}, which could not be raised (${why}): running with ${r.soft}; raise LimitNOFILE (systemd) or the container's nofile limit`;
  }
  const soft = Number.isFinite(r.soft) ? r.soft : UNLIMITED;
  return {
    configured: configured ?? null,
    soft,
    hard: Number.isFinite(r.hard) ? r.hard : UNLIMITED,
    reserve,
    forHandles: soft - reserve,
    ...(warning !== undefined ? { warning } : {}),
  };
}
