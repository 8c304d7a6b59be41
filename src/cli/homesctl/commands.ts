/**
 * homesctl's command table: every daemon command by its wire name, in the
 * order `homesctl --help` lists them, plus the aliases (top) and the commands
 * that run here rather than in the daemon (exec, passwd), and the lookups from
 * command-line words to a command. Adding a command: one entry in
 * commands-homes.ts or commands-names.ts and its line here (the compiler
 * insists on one per daemon command).
 */
import type { CommandName } from '../../control/protocol.js';
import type { CommandTable, LooseCliCommand } from './command-spec.js';
import { HOME_COMMANDS } from './commands-homes.js';
import { NAME_COMMANDS } from './commands-names.js';

/** The key order is the order of help, and of the "did you mean" candidates. */
export const COMMANDS: CommandTable = {
  status: HOME_COMMANDS.status,
  reload: HOME_COMMANDS.reload,
  list: HOME_COMMANDS.list,
  usage: HOME_COMMANDS.usage,
  create: HOME_COMMANDS.create,
  'set-budget': HOME_COMMANDS['set-budget'],
  'set-limits': HOME_COMMANDS['set-limits'],
  'set-profile': HOME_COMMANDS['set-profile'],
  'settings-get': NAME_COMMANDS['settings-get'],
  'settings-set': NAME_COMMANDS['settings-set'],
  rescan: HOME_COMMANDS.rescan,
  resolve: NAME_COMMANDS.resolve,
  'rename-project': NAME_COMMANDS['rename-project'],
  'rename-user': NAME_COMMANDS['rename-user'],
  'delete-project': NAME_COMMANDS['delete-project'],
  'delete-user': NAME_COMMANDS['delete-user'],
  'delete-home': NAME_COMMANDS['delete-home'],
  'delete-tenant': NAME_COMMANDS['delete-tenant'],
  forwards: NAME_COMMANDS.forwards,
  'release-name': NAME_COMMANDS['release-name'],
  'tenant-usage': HOME_COMMANDS['tenant-usage'],
  'set-tenant-budget': HOME_COMMANDS['set-tenant-budget'],
};

/** Command-line words that stand for another command with preset options (declarative, like COMMANDS). */
export const ALIASES: Readonly<Record<string, { summary: string; argv: readonly string[] }>> = {
  top: { summary: 'The busiest homes, refreshed until Ctrl-C (list --watch --sort busy --limit 20)', argv: ['list', '--watch', '--sort', 'busy', '--limit', '20'] },
};

/** A command's entry, loosely typed for the generic driver code. */
export function specOf(cmd: CommandName): LooseCliCommand {
  return COMMANDS[cmd] as unknown as LooseCliCommand;
}

/** The name a command goes by on the command line. */
export function cliName(cmd: CommandName): string {
  return specOf(cmd).cli ?? cmd;
}

/** Command-line names (one or two words) and wire names, to the command. */
const BY_CLI_NAME: ReadonlyMap<string, CommandName> = new Map(
  (Object.keys(COMMANDS) as CommandName[]).flatMap((c) => [[c, c] as const, [cliName(c), c] as const]),
);
/** First words of two-word commands ("settings"). */
export const GROUPS: ReadonlySet<string> = new Set((Object.keys(COMMANDS) as CommandName[]).map(cliName).filter((n) => n.includes(' ')).map((n) => n.split(' ')[0]!));

/** The command named by `name` (and, for a group, the next word). */
export function findCommand(name: string, rest: string[]): { command: CommandName; rest: string[] } | undefined {
  if (GROUPS.has(name)) {
    const sub = rest[0] === undefined ? undefined : BY_CLI_NAME.get(`${name} ${rest[0]}`);
    return sub === undefined ? undefined : { command: sub, rest: rest.slice(1) };
  }
  const one = name.includes(' ') ? undefined : BY_CLI_NAME.get(name);
  return one === undefined ? undefined : { command: one, rest };
}

/** Every word that names a command, for "did you mean". */
export function commandWords(): string[] {
  return [...new Set([...(Object.keys(COMMANDS) as CommandName[]).map((c) => cliName(c).split(' ')[0]!), ...Object.keys(ALIASES), 'help'])];
}

/** The commands homesctl runs itself (exec.ts), for the main help; [name, summary]. */
export const LOCAL_COMMANDS = [
  ['exec', "Run a command in a home as its owner, with a sealed environment (exit status passes through)"],
  ['passwd', "passwd/group lines of home owners, for containers"],
] as const;
