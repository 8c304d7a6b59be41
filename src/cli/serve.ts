import { parseArgs } from 'node:util';
import { ConfigError, DEMO_DEFAULTS, DEMO_HOMES, loadConfig, reloadConfig, stateFileOf, type LoadedConfig } from '../config/load.js';
import { DaemonError, startDaemon } from '../daemon.js';
import { createRootLogger } from '../log.js';
import { configOwners, existingOwnerProblems } from '../scope/owner-check.js';
import { getentLookup, withoutOwn } from '../users/hostids.js';
import { ownerUserName } from '../users/names.js';
import { VERSION } from '../version.js';
import { EXIT } from './exitcodes.js';
import { notifySystemd } from './notify.js';
import { reloadCommand } from './reload.js';

const USAGE = `usage: homesfs serve --config FILE [--backing DIR] [--mount DIR] [--socket PATH] [--log-level LEVEL] [--check] [--takeover]
       homesfs serve --demo [--backing DIR] [--mount DIR] [--socket PATH] [--log-level LEVEL]
       homesfs serve --backing DIR --mount DIR [--socket PATH] [--log-level LEVEL]
       homesfs check-config FILE
       homesfs reload --config FILE [--takeover]
       homesfs --version

serve runs in the foreground; flags win over the file. --check validates the
configuration without mounting (exit 0, warnings included, or 3 with every
problem; a missing or unreadable file is also 3). --takeover takes the live
session of the daemon serving the same configuration over (a live upgrade:
processes in homes see a pause, not an error); exit 12 if it cannot, while
that daemon serves on.
reload (systemd's ExecReload=) asks the daemon serving FILE which code it
runs: the same build as this installed one re-reads the configuration (as
SIGHUP); another build, or --takeover, starts serve --config FILE --takeover
of this package and exits 0 once it serves, or with its exit code (the
running daemon serves on).
--demo serves the built-in demo configuration:
  backing ${DEMO_DEFAULTS.backing}
  mount   ${DEMO_DEFAULTS.mount}
  socket  ${DEMO_DEFAULTS.socket}
with a tenant "demo" and homes "_tenant" and "hello" (created with owners from the pool).`;

const NO_CONFIG = `no configuration given; homesfs will not guess where to serve.
  the demo:       homesfs serve --demo        (from a checkout: ./scripts/demo.sh)
  for real:       homesfs serve --config /etc/homesfs/config.json
                  (example: systemd/config.example.json in the package; check it with: homesfs check-config FILE)
  or at least:    homesfs serve --backing DIR --mount DIR`;

function fail(code: number, message: string): never {
  process.stderr.write(`homesfs: ${message}\n`);
  process.exit(code);
}

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        backing: { type: 'string' },
        mount: { type: 'string' },
        socket: { type: 'string' },
        config: { type: 'string' },
        'log-level': { type: 'string' },
        demo: { type: 'boolean' },
        check: { type: 'boolean' },
        takeover: { type: 'boolean' },
        version: { type: 'boolean', short: 'V' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    fail(EXIT.USAGE, `${(err as Error).message}\n${USAGE}`);
  }
  const { values, positionals } = parsed;
  if (values.version) {
    process.stdout.write(`homesfs ${VERSION}\n`);
    return;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  if (positionals[0] === 'check-config') {
    if (positionals.length !== 2) fail(EXIT.USAGE, USAGE);
    return await checkConfig(positionals[1]!);
  }
  if (positionals[0] === 'reload') {
    const extra = Object.keys(values).filter((k) => k !== 'config' && k !== 'takeover');
    if (positionals.length !== 1 || values.config === undefined || extra.length > 0) fail(EXIT.USAGE, `reload takes --config FILE and --takeover only\n${USAGE}`);
    const code = await reloadCommand(values.config, values.takeover === true);
    process.exit(code);
  }
  if (positionals[0] !== 'serve' || positionals.length > 1) fail(EXIT.USAGE, USAGE);
  if (values.demo && values.config !== undefined) fail(EXIT.USAGE, '--demo and --config exclude each other');
  if (!values.demo && values.config === undefined && (values.backing === undefined || values.mount === undefined)) fail(EXIT.CONFIG, NO_CONFIG);

  const overrides = {
    backing: values.backing,
    mount: values.mount,
    socket: values.socket,
    logLevel: values['log-level'] as LoadedConfig['config']['logLevel'] | undefined,
  };
  const configFile = values.config;
  const readConfig = configFile === undefined ? undefined : () => reloadConfig(configFile, overrides);
  let loaded: LoadedConfig;
  try {
    loaded = loadConfig(configFile, overrides, { demo: values.demo === true });
  } catch (err) {
    if (err instanceof ConfigError) fail(EXIT.CONFIG, err.message);
    throw err;
  }
  if (values.check) return reportValid(loaded, values.demo ? '(demo)' : undefined);
  const { config } = loaded;
  const log = createRootLogger(config.logLevel);
  // Created files get exactly the mode the policy computed, not mode & ~umask.
  process.umask(0);

  let daemon;
  try {
    daemon = await startDaemon(loaded, log, readConfig, {
      takeover: values.takeover === true,
      ...(values.demo ? { ensureHomes: DEMO_HOMES } : {}),
      // From the main process, before the successor hears that this one is gone (takeover.ts):
      // systemd must know the new main process first, or the unit counts as stopped when this
      // process exits, and the successor's notifications (READY=1, its fd store entries) are
      // refused (NotifyAccess=exec). systemd-notify returns once systemd has processed it.
      nameSuccessor: (pid) => notifySystemd(log, [`MAINPID=${pid}`, `--status=handed the session to pid ${pid}`]),
    });
  } catch (err) {
    if (err instanceof DaemonError) {
      log.fatal({ exitCode: err.exitCode }, err.message);
      log.flush();
      fail(err.exitCode, err.message);
    }
    throw err;
  }
  const d = daemon;
  process.on('SIGHUP', () => void d.reload());
  let signals = 0;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (signals++ > 0) {
        log.warn({ signal: sig }, 'second signal: unmounting without waiting for the homes in use');
        d.hurry();
        return;
      }
      log.info({ signal: sig }, 'shutting down');
      void notifySystemd(log, ['STOPPING=1']);
      void d.stop();
    });
  }
  // Only now, with the mount answering, the self-check done and the sockets
  // listening: what a Type=notify unit waits for before starting its dependents.
  // A successor names itself the main process too: its predecessor already did
  // (below), unless that one was a build that did not.
  void notifySystemd(log, ['--ready', `--status=serving ${config.mount}`, ...(values.takeover ? [`MAINPID=${process.pid}`] : [])]);
  const code = await daemon.done;
  const successor = daemon.handedOverTo();
  if (successor !== null) {
    // systemd knows the successor as the main process by now (nameSuccessor above).
    // The frees this daemon answered early during the handover finish here (the
    // exit would wait for the threadpool anyway): the successor serves, and needs
    // nothing more of this process, whose handover connection is closed by now.
    const frees = daemon.freesPending();
    if (frees > 0) {
      const t0 = Date.now();
      log.info({ frees }, 'exiting once the frees answered early during the handover are done');
      await daemon.freesDone();
      log.info({ frees, ms: Date.now() - t0 }, 'the frees answered early are done');
    }
  }
  log.info({ exitCode: code }, 'stopped');
  log.flush(() => process.exit(code));
}

/** The valid line on stdout, each warning on stderr: warnings alone still exit 0 (the daemon would serve this file). */
function reportValid(loaded: LoadedConfig, label?: string): void {
  const c = loaded.config;
  const n = loaded.warnings.length;
  const warned = n === 0 ? '' : ` with ${n} warning${n > 1 ? 's' : ''}`;
  process.stdout.write(`${loaded.path ?? label ?? '(flags)'}: valid${warned} (backing ${c.backing}, mount ${c.mount}, state ${stateFileOf(c)}, socket ${c.socket})\n`);
  for (const w of loaded.warnings) process.stderr.write(`homesfs: warning: ${w.path}: ${w.message}\n`);
}

/**
 * Validate without mounting, without touching the backing tree or the state: 0 or 3.
 * The `homes` entries' owners are checked as at start-up, among themselves and
 * against the host's user database (what the state file adds is checked at start).
 */
async function checkConfig(file: string): Promise<void> {
  let loaded: LoadedConfig;
  try {
    loaded = loadConfig(file, {});
  } catch (err) {
    if (err instanceof ConfigError) fail(EXIT.CONFIG, err.message);
    throw err;
  }
  const owners = configOwners(loaded.config.homes);
  if (owners.length > 0) {
    let host;
    try {
      host = withoutOwn(
        await getentLookup()(
          owners.map((o) => o.owner.uid),
          owners.map((o) => o.owner.gid),
        ),
        owners.map((o) => ({ name: ownerUserName(o.home.slice(0, o.home.indexOf('/')), o.home.slice(o.home.indexOf('/') + 1)), uid: o.owner.uid, gid: o.owner.gid })),
      );
    } catch (err) {
      fail(EXIT.CONFIG, `${file}: the host's user database could not be asked about the homes' owners: ${(err as Error).message}`);
    }
    const problems = existingOwnerProblems(owners, { range: loaded.config.owners, holders: owners, retired: new Set(), hostUsers: host.users, hostGroups: host.groups });
    if (problems.length > 0) fail(EXIT.CONFIG, `${file}: owners refused (an owner uid or gid belongs to one home: never 0, 65534, another tenant's or an account the host knows):\n  ${problems.join('\n  ')}`);
  }
  reportValid(loaded);
}

main().catch((err: unknown) => {
  process.stderr.write(`homesfs: internal error: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(EXIT.INTERNAL);
});
