/**
 * From argv to what homesctl will do: split the global options from the
 * command's, resolve aliases and two-word commands, check the positionals,
 * choose the control socket and the timeout, and either build the request
 * (an Invocation) or answer with a help text (main, group or per-command
 * usage, all generated from the command table so help cannot drift from what
 * parses). Nothing here talks to the daemon or prints; run.ts does both.
 */
import type { CommandName } from '../../control/protocol.js';
import { VERSION } from '../../version.js';
import { chooseSocket, DEFAULT_CONFIG, type SocketChoice } from '../sockets.js';
import { DEFAULT_SOCKET, DEFAULT_TIMEOUT_MS, GLOBAL_OPTIONS, GLOBAL_TAKES_VALUE, hint, parseStrict, UsageError, type Values } from './args.js';
import { ALIASES, cliName, COMMANDS, commandWords, findCommand, GROUPS, LOCAL_COMMANDS, specOf } from './commands.js';
import { clean } from './render.js';

function mainUsage(): string {
  const names = Object.keys(COMMANDS) as CommandName[];
  const rows: Array<[string, string]> = [...names.map((n): [string, string] => [cliName(n), specOf(n).summary]), ...Object.entries(ALIASES).map(([n, a]): [string, string] => [n, a.summary])];
  const w = Math.max(...rows.map(([n]) => n.length)) + 2;
  return [
    'Usage: homesctl [--socket PATH | --config FILE] [--json] [--timeout MS] <command> [args]',
    '',
    'Talk to the homesfs daemon over its control socket.',
    '',
    'Commands:',
    ...rows.map(([n, t]) => `  ${n.padEnd(w)}${t}`),
    ...LOCAL_COMMANDS.map(([n, summary]) => `  ${n.padEnd(w)}${summary}`),
    '',
    globalOptionHelp(),
    '',
    "Run 'homesctl <command> --help' for a command's arguments.",
    '',
    'Exit codes: 0 ok; 1 the daemon replied an error (CODE: message on stderr);',
    '            2 usage error; 3 no answer (cannot connect, timeout, bad reply);',
    '            4 status: the daemon answers but does not serve (not mounted, loop ended, self-check failed);',
    '            5 status: no daemon answers, but its session is kept (a holder, or systemd starting it again).',
    '',
  ].join('\n');
}

function globalOptionHelp(): string {
  return [
    'Global options:',
    '  --socket PATH   control socket (default: $HOMESFS_SOCKET, else "socket" in the daemon\'s',
    `                  configuration, else ${DEFAULT_SOCKET})`,
    `  --config FILE   the daemon's configuration, read for its socket paths (default: $HOMESFS_CONFIG,`,
    `                  else ${DEFAULT_CONFIG} when it exists)`,
    '  --json          print exactly one JSON value on stdout: the reply data, or {"ok":false,"code",…}',
    '                  for an error reply, a usage error (USAGE) or no answer (UNREACHABLE)',
    `  --timeout MS    give up after MS milliseconds (default ${DEFAULT_TIMEOUT_MS})`,
    '  -h, --help      show help',
    '  -V, --version   print the version',
  ].join('\n');
}

/** Help for a group of two-word commands ("settings"). */
function groupUsage(group: string): string {
  const names = (Object.keys(COMMANDS) as CommandName[]).filter((n) => cliName(n).startsWith(`${group} `));
  const w = Math.max(...names.map((n) => cliName(n).length)) + 2;
  return [
    `Usage: homesctl [global options] ${group} <${names.map((n) => cliName(n).slice(group.length + 1)).join('|')}> [args]`,
    '',
    'Commands:',
    ...names.map((n) => `  ${cliName(n).padEnd(w)}${specOf(n).summary}`),
    '',
    `Run 'homesctl ${group} <command> --help' for a command's arguments.`,
    '',
  ].join('\n');
}

function commandUsage(name: CommandName): string {
  const c = specOf(name);
  const lines = [`Usage: homesctl [global options] ${cliName(name)}${c.synopsis ? ` ${c.synopsis}` : ''}${c.optionHelp?.length && !c.synopsis?.includes('--') ? ' [options]' : ''}`, '', c.summary + '.'];
  if (c.description) lines.push('', c.description);
  if (c.optionHelp?.length) {
    const w = Math.max(...c.optionHelp.map(([f]) => f.length)) + 2;
    lines.push('', 'Options:', ...c.optionHelp.map(([f, t]) => `  ${f.padEnd(w)}${t}`));
  }
  lines.push('', globalOptionHelp(), '');
  return lines.join('\n');
}

export interface Invocation {
  kind: 'run';
  command: CommandName;
  socket: string;
  /** where the socket path came from */
  socketFrom: SocketChoice;
  json: boolean;
  timeoutMs: number;
  args: unknown;
  /** the parsed command line (client-side options such as --sort, --watch) */
  values: Values;
}

export type Parsed = Invocation | { kind: 'help'; text: string };

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
  let name = argv[i];
  let rest = argv.slice(i + 1);
  const alias = name !== undefined && Object.hasOwn(ALIASES, name) ? ALIASES[name]! : undefined;
  if (alias) {
    name = alias.argv[0]!;
    rest = [...alias.argv.slice(1), ...rest];
  }

  const g = parseStrict(globalArgs, GLOBAL_OPTIONS, false);
  if (name === undefined) {
    if (g.values.version) return { kind: 'help', text: `homesctl ${VERSION}\n` };
    if (g.values.help) return { kind: 'help', text: mainUsage() };
    throw new UsageError('missing command');
  }
  if (name === 'help') {
    const found = rest[0] === undefined ? undefined : findCommand(rest[0], rest.slice(1));
    if (found) return { kind: 'help', text: commandUsage(found.command) };
    return { kind: 'help', text: rest[0] !== undefined && GROUPS.has(rest[0]) ? groupUsage(rest[0]) : mainUsage() };
  }
  const found = findCommand(name, rest);
  if (found === undefined) {
    if (!GROUPS.has(name)) throw new UsageError(`unknown command '${clean(name)}'${hint(name, commandWords())}`);
    if (g.values.help || rest.includes('--help') || rest.includes('-h')) return { kind: 'help', text: groupUsage(name) };
    const sub = rest[0];
    const subs = (Object.keys(COMMANDS) as CommandName[]).map(cliName).filter((n) => n.startsWith(`${name} `)).map((n) => n.slice(name!.length + 1));
    throw new UsageError(sub === undefined ? `${name}: missing subcommand (${subs.join(' or ')})` : `${name}: unknown subcommand '${clean(sub)}'${hint(sub, subs)}`, name);
  }
  const { command } = found;
  const display = cliName(command);
  const spec = specOf(command);
  const c = parseStrict(found.rest, { ...GLOBAL_OPTIONS, ...(spec.options ?? {}) }, true, display);
  const values: Values = { ...g.values, ...c.values };
  if (values.help) return { kind: 'help', text: commandUsage(command) };

  const { min, max } = spec.positionals ?? { min: 0, max: 0 };
  if (c.positionals.length < min) throw new UsageError(`${display}: missing argument (${spec.synopsis ?? ''})`.replace(/ \(\)$/, ''), display);
  if (c.positionals.length > max) throw new UsageError(`${display}: unexpected argument '${clean(c.positionals[max]!)}'`, display);

  if (values.socket === '') throw new UsageError('--socket: empty path');
  if (values.config === '') throw new UsageError('--config: empty path');
  const socketFrom = chooseSocket('admin', { socket: values.socket as string | undefined, config: values.config as string | undefined }, env);
  const socket = socketFrom.path;
  let timeoutMs = spec.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (values.timeout !== undefined) {
    const t = String(values.timeout);
    if (!/^[0-9]+$/.test(t) || Number(t) < 1 || !Number.isSafeInteger(Number(t))) throw new UsageError(`--timeout: expected a positive number of milliseconds, got '${clean(t)}'`);
    timeoutMs = Number(t);
  }
  return { kind: 'run', command, socket, socketFrom, json: values.json === true, timeoutMs, args: spec.args(values, c.positionals), values };
}
