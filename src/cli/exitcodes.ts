/**
 * Exit codes of `homesfs serve`, documented in the README (gocryptfs keeps the
 * same kind of table). systemd's Restart= policy and scripts key on them.
 */
export const EXIT = {
  OK: 0,
  /** an unexpected error (a bug): see the log */
  INTERNAL: 1,
  /** bad command line */
  USAGE: 2,
  /** the configuration file is missing or unreadable (said so), or the file or flags are invalid (every problem is printed) */
  CONFIG: 3,
  /** the FUSE binding is missing, or its native addon was built from other sources (another ABI) */
  NATIVE: 4,
  /** mounting failed (mount point busy, /dev/fuse missing, not root…) */
  MOUNT: 5,
  /** the mount went away while serving (unmounted behind the daemon, FUSE loop ended) */
  MOUNT_LOST: 6,
  /** the control socket could not be created */
  CONTROL: 7,
  /** the backing directory cannot be used */
  BACKING: 8,
  /** the state file is unreadable or invalid: the daemon will not guess owners or limits */
  STATE: 9,
  /** another daemon holds the backing tree's or the state file's lock */
  LOCKED: 10,
  /** the backing root or a tenant directory is reachable by a non-root uid (see allowOpenBacking) */
  BACKING_OPEN: 11,
  /** --takeover: no daemon serves this configuration, it refused, or the exchange failed (it serves on) */
  TAKEOVER: 12,
  /** a holder keeps the session of a daemon that died, and this build cannot resume it (or the holder refused the claim): stop the holder, or the daemon it names */
  HELD: 13,
} as const;

/**
 * The exit codes a restart cannot heal: each waits for an admin (an edit, a
 * reinstall, a chmod, the other daemon stopped), so systemd's Restart= would
 * only retry them every RestartSec forever. The unit's RestartPreventExitStatus
 * lists exactly these (test/unit/systemd.test.ts). The others may pass by
 * themselves: a bug's race (1), a mount point still busy or /dev/fuse not yet
 * there (5), a lost mount (6), a socket or port a dying predecessor still holds
 * (7), a backing disk that was full or erring (8).
 */
export const NO_RESTART: readonly number[] = [EXIT.USAGE, EXIT.CONFIG, EXIT.NATIVE, EXIT.STATE, EXIT.LOCKED, EXIT.BACKING_OPEN];
