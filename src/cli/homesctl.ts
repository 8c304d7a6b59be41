#!/usr/bin/env node
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { StatusReport } from '../control/api.js';
import { ControlClientError, controlRequest } from '../control/client.js';
import type { ArgsOf, CommandName } from '../control/protocol.js';

/**
 * homesctl [--socket PATH] [--json] [--timeout MS] <command> [args]
 *
 * Adding a command: one entry in COMMANDS below (the compiler insists on one
 * per daemon command): its options/positionals, how they become the request's
 * `args`, and how the reply's `data` is printed for humans.
 */

export const EXIT = {
  OK: 0,
  /** The daemon answered with an error reply. */
  ERROR_REPLY: 1,
  /** Bad command line. */
  USAGE: 2,
  /** No usable answer: cannot connect, timeout, connection dropped, malformed reply. */
  UNREACHABLE: 3,
} as const;

export const DEFAULT_SOCKET = '/run/homesfs/admin.sock';
const DEFAULT_TIMEOUT_MS = 10_000;

type OptionsConfig = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

interface CliCommand<K extends CommandName> {
  summary: string;
  /** Argument synopsis after the command name, e.g. "HOME BYTES". */
  synopsis?: string;
  /** Longer help text printed by `homesctl <command> --help`. */
  description?: string;
  options?: OptionsConfig;
  /** [flag as shown, explanation] for the command's own options. */
  optionHelp?: ReadonlyArray<readonly [string, string]>;
  positionals?: { min: number; max: number };
  /** Client timeout when --timeout is not given. */
  timeoutMs?: number;
  /** Turn the parsed command line into the request's args; throw UsageError on nonsense. */
  args(values: Values, positionals: string[]): ArgsOf<K>;
  /** Human-readable rendering of the reply's `data`. */
  human(data: unknown): string;
}

class UsageError extends Error {
  /** The command whose usage was wrong, for the "Try 'homesctl CMD --help'" hint. */
  readonly command: string | undefined;
  constructor(message: string, command?: string) {
    super(message);
    this.command = command;
  }
}

// ---- commands -------------------------------------------------------------

const COMMANDS: { readonly [K in CommandName]: CliCommand<K> } = {
  status: {
    summary: 'Mount liveness, native self-check and per-home scan progress',
    description: 'Shows whether the mount answers, the FUSE loop state, the native layer self-check, uptime, and each home with its scan state and usage.',
    positionals: { min: 0, max: 0 },
    args: () => ({}),
    human: (data) => renderStatus(data as StatusReport),
  },
};

// ---- rendering ------------------------------------------------------------

/** Escape control characters so daemon-supplied names cannot drive the terminal. */
export function clean(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

export function formatBytes(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '-';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

export function formatDuration(totalSec: number): string {
  if (!Number.isFinite(totalSec) || totalSec < 0) return '-';
  let s = Math.floor(totalSec);
  const d = Math.floor(s / 86_400);
  s -= d * 86_400;
  const h = Math.floor(s / 3_600);
  s -= h * 3_600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  const parts: string[] = [];
  if (d > 0) parts.push(`${d}d`);
  if (d > 0 || h > 0) parts.push(`${h}h`);
  if (d > 0 || h > 0 || m > 0) parts.push(`${m}m`);
  parts.push(`${s}s`);
  return parts.join(' ');
}

/** Columns padded to their widest cell; columns listed in `right` are right-aligned. */
export function formatTable(headers: string[], rows: string[][], right: ReadonlySet<number> = new Set()): string {
  const cells = [headers, ...rows].map((r) => r.map(clean));
  const widths = headers.map((_, c) => Math.max(...cells.map((r) => [...(r[c] ?? '')].length)));
  return cells
    .map((r) =>
      r
        .map((cell, c) => {
          const pad = ' '.repeat((widths[c] ?? 0) - [...cell].length);
          if (c === r.length - 1 && !right.has(c)) return cell;
          return right.has(c) ? pad + cell : cell + pad;
        })
        .join('  '),
    )
    .join('\n');
}

function keyValues(pairs: ReadonlyArray<readonly [string, string]>): string {
  const w = Math.max(...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(w)} ${clean(v)}`).join('\n');
}

function renderStatus(s: StatusReport): string {
  const probe =
    s.mount.lastProbeAt === null
      ? 'never'
      : `${s.mount.lastProbeAt} (${s.mount.lastProbeOk ? 'ok' : `failed${s.mount.lastProbeError ? `: ${s.mount.lastProbeError}` : ''}`})`;
  const nativeExtra = [`patch ${s.native.patch}`];
  if (s.native.maxWriteRequest !== null) nativeExtra.push(`max write ${formatBytes(s.native.maxWriteRequest)}`);
  if (s.native.detail) nativeExtra.push(s.native.detail);
  const head = keyValues([
    ['Mount', s.mount.path],
    ['Mounted', s.mount.mounted ? 'yes' : 'no'],
    ['Loop', s.mount.loop],
    ['Last probe', probe],
    ['Native', `${s.native.selfCheck} (${nativeExtra.join(', ')})`],
    ['Uptime', formatDuration(s.uptimeSec)],
    ['Daemon', `homesfs ${s.version}, pid ${s.pid}`],
    ['Backing', s.backing],
    ['Config', s.configPath ?? '(none)'],
  ]);
  const homes =
    s.homes.length === 0
      ? 'No homes.'
      : formatTable(
          ['TENANT', 'KEY', 'SCAN', 'BYTES', 'INODES'],
          s.homes.map((h) => [h.tenant, h.key, h.scan, formatBytes(h.bytes), h.inodes === undefined ? '-' : String(h.inodes)]),
          new Set([3, 4]),
        );
  return `${head}\n\n${homes}\n`;
}

// ---- argument parsing -----------------------------------------------------

const GLOBAL_OPTIONS = {
  socket: { type: 'string' },
  json: { type: 'boolean' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies OptionsConfig;

const GLOBAL_TAKES_VALUE = new Set(['--socket', '--timeout']);

function mainUsage(): string {
  const names = Object.keys(COMMANDS) as CommandName[];
  const w = Math.max(...names.map((n) => n.length)) + 2;
  return [
    'Usage: homesctl [--socket PATH] [--json] [--timeout MS] <command> [args]',
    '',
    'Talk to the homesfs daemon over its control socket.',
    '',
    'Commands:',
    ...names.map((n) => `  ${n.padEnd(w)}${COMMANDS[n].summary}`),
    '',
    globalOptionHelp(),
    '',
    "Run 'homesctl <command> --help' for a command's arguments.",
    '',
    'Exit codes: 0 ok; 1 the daemon replied an error (CODE: message on stderr);',
    '            2 usage error; 3 no answer (cannot connect, timeout, bad reply).',
    '',
  ].join('\n');
}

function globalOptionHelp(): string {
  return [
    'Global options:',
    `  --socket PATH   control socket (default: $HOMESFS_SOCKET, else ${DEFAULT_SOCKET})`,
    '  --json          print the raw reply data as JSON (error replies too, on stdout)',
    `  --timeout MS    give up after MS milliseconds (default ${DEFAULT_TIMEOUT_MS})`,
    '  -h, --help      show help',
  ].join('\n');
}

function commandUsage(name: CommandName): string {
  const c: CliCommand<CommandName> = COMMANDS[name];
  const lines = [`Usage: homesctl [global options] ${name}${c.synopsis ? ` ${c.synopsis}` : ''}${c.optionHelp?.length ? ' [options]' : ''}`, '', c.summary + '.'];
  if (c.description) lines.push('', c.description);
  if (c.optionHelp?.length) {
    const w = Math.max(...c.optionHelp.map(([f]) => f.length)) + 2;
    lines.push('', 'Options:', ...c.optionHelp.map(([f, t]) => `  ${f.padEnd(w)}${t}`));
  }
  lines.push('', globalOptionHelp(), '');
  return lines.join('\n');
}

interface Invocation {
  kind: 'run';
  command: CommandName;
  socket: string;
  json: boolean;
  timeoutMs: number;
  args: unknown;
}

type Parsed = Invocation | { kind: 'help'; text: string };

/** Parse argv (without node and script). Throws UsageError. */
export function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv): Parsed {
  // Split at the command name: global options before it, the command's after.
  let i = 0;
  while (i < argv.length) {
    const a = argv[i]!;
    if (a === '--') {
      i++;
      break;
    }
    if (!a.startsWith('-') || a === '-') break;
    i += GLOBAL_TAKES_VALUE.has(a) ? 2 : 1;
  }
  const globalArgs = argv.slice(0, Math.min(i, argv.length)).filter((a) => a !== '--');
  const name = argv[i];
  const rest = argv.slice(i + 1);

  const g = parseStrict(globalArgs, GLOBAL_OPTIONS, false);
  if (name === undefined) {
    if (g.values.help) return { kind: 'help', text: mainUsage() };
    throw new UsageError('missing command');
  }
  if (!Object.hasOwn(COMMANDS, name)) {
    if (name === 'help') return { kind: 'help', text: rest[0] && Object.hasOwn(COMMANDS, rest[0]) ? commandUsage(rest[0] as CommandName) : mainUsage() };
    throw new UsageError(`unknown command '${clean(name)}'`);
  }
  const command = name as CommandName;
  const spec: CliCommand<CommandName> = COMMANDS[command];
  const c = parseStrict(rest, { ...GLOBAL_OPTIONS, ...(spec.options ?? {}) }, true, command);
  const values: Values = { ...g.values, ...c.values };
  if (values.help) return { kind: 'help', text: commandUsage(command) };

  const { min, max } = spec.positionals ?? { min: 0, max: 0 };
  if (c.positionals.length < min) throw new UsageError(`${command}: missing argument (${spec.synopsis ?? ''})`.replace(/ \(\)$/, ''), command);
  if (c.positionals.length > max) throw new UsageError(`${command}: unexpected argument '${clean(c.positionals[max]!)}'`, command);

  const socket = typeof values.socket === 'string' ? values.socket : env.HOMESFS_SOCKET || DEFAULT_SOCKET;
  if (socket === '') throw new UsageError('--socket: empty path');
  let timeoutMs = spec.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (values.timeout !== undefined) {
    const t = String(values.timeout);
    if (!/^[0-9]+$/.test(t) || Number(t) < 1 || !Number.isSafeInteger(Number(t))) throw new UsageError(`--timeout: expected a positive number of milliseconds, got '${clean(t)}'`);
    timeoutMs = Number(t);
  }
  return { kind: 'run', command, socket, json: values.json === true, timeoutMs, args: spec.args(values, c.positionals) };
}

function parseStrict(args: string[], options: OptionsConfig, allowPositionals: boolean, command?: string): { values: Values; positionals: string[] } {
  try {
    const r = parseArgs({ args, options, strict: true, allowPositionals });
    return { values: r.values as Values, positionals: r.positionals };
  } catch (err) {
    throw new UsageError(`${command ? `${command}: ` : ''}${(err as Error).message}`, command);
  }
}

// ---- main -----------------------------------------------------------------

export interface Io {
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env, io: Io = process): Promise<number> {
  let inv: Parsed;
  try {
    inv = parseCommandLine(argv, env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    const cmd = err.command ? `${err.command} ` : '';
    io.stderr.write(`homesctl: ${err.message}\nTry 'homesctl ${cmd}--help'.\n`);
    return EXIT.USAGE;
  }
  if (inv.kind === 'help') {
    io.stdout.write(inv.text);
    return EXIT.OK;
  }

  let reply;
  try {
    reply = await controlRequest(inv.socket, { cmd: inv.command, args: inv.args } as Parameters<typeof controlRequest>[1], { timeoutMs: inv.timeoutMs });
  } catch (err) {
    if (err instanceof ControlClientError) {
      io.stderr.write(`homesctl: ${err.message}\n`);
      return EXIT.UNREACHABLE;
    }
    throw err;
  }

  if (!reply.ok) {
    if (inv.json) io.stdout.write(JSON.stringify(reply, null, 2) + '\n');
    io.stderr.write(`homesctl: ${reply.code}: ${clean(reply.message)}\n`);
    if (!inv.json && reply.details && Object.keys(reply.details).length > 0) io.stderr.write(`  details: ${clean(JSON.stringify(reply.details))}\n`);
    return EXIT.ERROR_REPLY;
  }
  if (inv.json) {
    io.stdout.write(JSON.stringify(reply.data, null, 2) + '\n');
  } else {
    const spec: CliCommand<CommandName> = COMMANDS[inv.command];
    io.stdout.write(spec.human(reply.data));
  }
  return EXIT.OK;
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(script)).href;
  } catch {
    // argv[1] does not name a readable file (e.g. `node -e`): not run as the CLI.
    return false;
  }
}

if (isEntryPoint()) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`homesctl: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 70;
    },
  );
}
