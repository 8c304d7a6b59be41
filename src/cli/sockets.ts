import { ConfigError, loadSocketPaths, type SocketPaths } from '../config/load.js';
import { ConfigSchema } from '../config/schema.js';

/**
 * Where homesctl finds the daemon's control sockets. For each socket, the first
 * of: the --socket flag, its environment variable (HOMESFS_SOCKET for the admin
 * socket, HOMESFS_PLATFORM_SOCKET for exec's platform socket), the daemon's
 * configuration file (`socket` / `platformSocket`), the built-in default. The
 * configuration file is --config, else HOMESFS_CONFIG, else DEFAULT_CONFIG;
 * it is read only when neither flag nor variable names the socket.
 */

export const DEFAULT_CONFIG = '/etc/homesfs/config.json';

/** The schema's defaults for the two socket keys: what a daemon without them in its file listens on. */
export const DEFAULT_SOCKETS: SocketPaths = (() => {
  const shape = ConfigSchema.shape;
  return { socket: shape.socket.parse(undefined), platformSocket: shape.platformSocket.parse(undefined) };
})();

export type SocketKind = 'admin' | 'platform';

/** Where the socket path came from, for the hints of a connection error. */
export type SocketSource = 'flag' | 'env' | 'config' | 'default';

export interface SocketChoice {
  path: string;
  from: SocketSource;
  /** the configuration file read (from: config), or looked for and not there (from: default) */
  config?: string;
  /** why the default applies although a configuration file was looked for */
  configNote?: string;
}

/** The configuration file cannot tell where the socket is: an explicit one is missing, or a file is invalid. */
export class SocketConfigError extends Error {}

const ENV_OF: Readonly<Record<SocketKind, string>> = { admin: 'HOMESFS_SOCKET', platform: 'HOMESFS_PLATFORM_SOCKET' };
const KEY_OF: Readonly<Record<SocketKind, keyof SocketPaths>> = { admin: 'socket', platform: 'platformSocket' };

export function socketEnvName(kind: SocketKind): string {
  return ENV_OF[kind];
}

/** `defaultConfig` is for tests, which must not read the host's /etc. */
export function chooseSocket(
  kind: SocketKind,
  flags: { socket?: string | undefined; config?: string | undefined },
  env: NodeJS.ProcessEnv,
  defaultConfig: string = DEFAULT_CONFIG,
): SocketChoice {
  if (flags.socket !== undefined) return { path: flags.socket, from: 'flag' };
  const fromEnv = env[ENV_OF[kind]];
  if (fromEnv) return { path: fromEnv, from: 'env' };
  const explicit = flags.config ?? (env.HOMESFS_CONFIG || undefined);
  const file = explicit ?? defaultConfig;
  let paths: SocketPaths;
  try {
    paths = loadSocketPaths(file);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const code = (err.cause as NodeJS.ErrnoException | undefined)?.code;
    // The default file is optional (a node may run the daemon with other paths
    // and set HOMESFS_SOCKET), and it is 0600 root: an admin-group member cannot
    // read it and still reaches the default socket.
    if (explicit === undefined && (code === 'ENOENT' || code === 'EACCES' || code === 'ENOTDIR')) {
      return { path: DEFAULT_SOCKETS[KEY_OF[kind]], from: 'default', config: file, configNote: code === 'ENOENT' || code === 'ENOTDIR' ? 'no such file' : `${code}: cannot be read` };
    }
    const via = flags.config !== undefined ? 'the configuration given with --config' : explicit !== undefined ? 'the configuration from HOMESFS_CONFIG' : 'the default configuration';
    throw new SocketConfigError(`${via}: ${err.issues.join('; ')}`);
  }
  return { path: paths[KEY_OF[kind]], from: 'config', config: file };
}

/** "given with --socket", "from HOMESFS_SOCKET", "from socket in /etc/homesfs/config.json", … */
export function describeOrigin(kind: SocketKind, c: SocketChoice): string {
  switch (c.from) {
    case 'flag':
      return 'given with --socket';
    case 'env':
      return `from ${ENV_OF[kind]}`;
    case 'config':
      return `from "${KEY_OF[kind]}" in ${c.config}`;
    case 'default':
      return `the built-in default; ${c.config}: ${c.configNote ?? 'not read'}; --config FILE or HOMESFS_CONFIG names the daemon's configuration`;
  }
}
