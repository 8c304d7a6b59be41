import { mkdir } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { ConfigError, DEMO_DEFAULTS, loadConfig, reloadConfig, type LoadedConfig } from '../config/load.js';
import { DaemonError, startDaemon } from '../daemon.js';
import { createRootLogger } from '../log.js';
import { EXIT } from './exitcodes.js';

const USAGE = `usage: homesfs serve [--backing DIR] [--mount DIR] [--socket PATH] [--config FILE] [--log-level LEVEL]

Runs in the foreground. With no --config, the built-in demo configuration is used:
  backing ${DEMO_DEFAULTS.backing}
  mount   ${DEMO_DEFAULTS.mount}
  socket  ${DEMO_DEFAULTS.socket}
and a demo tenant "demo" with homes "_tenant" and "hello" is created. Flags win over the file.`;

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
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    fail(EXIT.USAGE, `${(err as Error).message}\n${USAGE}`);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  if (positionals[0] !== 'serve' || positionals.length > 1) fail(EXIT.USAGE, USAGE);

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
    loaded = loadConfig(configFile, overrides);
  } catch (err) {
    if (err instanceof ConfigError) fail(EXIT.CONFIG, err.message);
    throw err;
  }
  const { config } = loaded;
  const log = createRootLogger(config.logLevel);
  // Created files get exactly the mode the policy computed, not mode & ~umask.
  process.umask(0);

  if (loaded.path === null && config.backing === DEMO_DEFAULTS.backing) {
    for (const home of ['demo/_tenant', 'demo/hello']) await mkdir(`${config.backing}/${home}`, { recursive: true, mode: 0o700 });
  }

  let daemon;
  try {
    daemon = await startDaemon(loaded, log, readConfig);
  } catch (err) {
    if (err instanceof DaemonError) {
      log.fatal({ exitCode: err.exitCode }, err.message);
      log.flush();
      fail(err.exitCode, err.message);
    }
    throw err;
  }
  process.on('SIGHUP', () => void daemon.reload());
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      log.info({ signal: sig }, 'shutting down');
      void daemon.stop();
    });
  }
  const code = await daemon.done;
  log.info({ exitCode: code }, 'stopped');
  log.flush(() => process.exit(code));
}

main().catch((err: unknown) => {
  process.stderr.write(`homesfs: internal error: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(EXIT.INTERNAL);
});
