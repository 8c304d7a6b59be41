/**
 * nss-systemd reads owner records only from fixed drop-in directories
 * (/run/userdb among them). To see what a daemon published into a directory
 * of the test's own, a program runs where that directory *is* /run/userdb:
 * in a mount namespace of its own (private propagation, so nothing mounted
 * there reaches the host), with an empty tmpfs on /run and the directory
 * bound at /run/userdb. The host's /run/userdb is never written, and never
 * read either.
 *
 * The tmpfs also hides the host's /run/systemd/userdb and nscd sockets: NSS
 * then reads the drop-ins in the program's own process, in this namespace,
 * instead of asking a service that sees the host's directory or a cache.
 * Everything else (the test's temp dirs, a FUSE mount made before) is the
 * same as outside: the namespace starts as a copy of the caller's mounts.
 */
export function withUserDb(userdb: string, cmd: string, args: readonly string[]): [string, string[]] {
  if (!userdb.startsWith('/') || userdb === '/run' || userdb.startsWith('/run/')) {
    throw new Error(`${userdb}: the records must be in an absolute directory outside /run (the tmpfs on /run would hide them)`);
  }
  const script = 'mount -t tmpfs -o mode=0755 homesfs-test-run /run && mkdir /run/userdb && mount --bind "$0" /run/userdb && exec "$@"';
  return ['unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-ec', script, userdb, cmd, ...args]];
}
