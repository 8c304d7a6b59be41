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
  /** the native addon is missing or cannot be loaded, or was built from other sources (another ABI) */
  NATIVE: 4,
  /** mounting failed (mount point not empty or busy with another mount, /dev/fuse missing, not root…) */
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
 * lists exactly these (test/unit/systemd.test.ts), each for its reason:
 *   USAGE, CONFIG      the command line or the file is wrong: an edit
 *   NATIVE             the binding is missing or another build's: a reinstall
 *   MOUNT              the mount point is not empty, holds another filesystem's
 *                      mount, a live daemon's, or a homesfs mount that does not
 *                      answer (something keeps its session: never cleared), or
 *                      mounting is not allowed: the same on every retry (a
 *                      restart loop every 2 s was seen on "mountpoint is not empty")
 *   STATE              the state file is invalid or names refused owners: an edit
 *   LOCKED             another daemon holds the tree: it must stop first
 *   BACKING_OPEN       the backing tree is open to other uids: a chmod
 *   HELD               a kept session this daemon refuses (another tree's, one it
 *                      cannot resume): every restart gets the same one back; under
 *                      systemd the unit then fails, which drops its fd store
 * The others may pass by themselves: a bug's race (1), a lost mount (6: the
 * next start mounts afresh), a socket or port a dying predecessor still holds
 * (7), a backing disk that was full or erring (8). TAKEOVER (12) comes only
 * from `serve --takeover`, which no restart runs.
 */
export const NO_RESTART: readonly number[] = [EXIT.USAGE, EXIT.CONFIG, EXIT.NATIVE, EXIT.MOUNT, EXIT.STATE, EXIT.LOCKED, EXIT.BACKING_OPEN, EXIT.HELD];
