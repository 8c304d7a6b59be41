/**
 * What one entry of homesctl's command table says about a daemon command: its
 * names, help texts, options and positionals, how the parsed command line
 * becomes the request's `args`, and how the reply's `data` is printed for
 * people. Kept apart from the entries themselves so the command families
 * (commands-homes.ts, commands-names.ts) and the generic driver (command-line.ts,
 * run.ts) share one contract, together with the help phrases and option sets
 * several families use.
 */
import type { ArgsOf, CommandName } from '../../control/protocol.js';
import { SIZE_SYNTAX } from '../size.js';
import type { OptionsConfig, Values } from './args.js';

export interface CliCommand<K extends CommandName> {
  /** The words that name it on the command line when they differ from the wire name ("settings get"). */
  cli?: string;
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
  /** Human-readable rendering of the reply's `data`; gets the request's args and the parsed command line for context. */
  human(data: unknown, args: ArgsOf<K>, values: Values): string;
  /** What --json prints on success when it is not the reply's `data` as is (e.g. sorted). */
  json?(data: unknown, args: ArgsOf<K>, values: Values): unknown;
  /** Takes --watch: the request is repeated and the table redrawn (list, top). */
  watchable?: boolean;
  /** Takes --force: a BUSY reply then hints at it. */
  force?: boolean;
}

/** A table entry without the link between name and argument type, for the generic driver (help texts, parsing, running a request). */
export interface LooseCliCommand extends Omit<CliCommand<CommandName>, 'args' | 'human' | 'json'> {
  args(values: Values, positionals: string[]): unknown;
  human(data: unknown, args: unknown, values: Values): string;
  json?(data: unknown, args: unknown, values: Values): unknown;
}

/** One entry per daemon command: the compiler insists on every one, each with its own argument type. */
export type CommandTable = { readonly [K in CommandName]: CliCommand<K> };

export const HOME_HELP = 'HOME is "tenant/key": the project name, _tenant or _user_<login>.';
export const FORCE_HELP = ['--force', 'go ahead even while files are open or working directories are inside'] as const;
export const TENANT_OPT = { tenant: { type: 'string' } } as const satisfies OptionsConfig;
export const TARGET_OPTS = { tenant: { type: 'string' }, project: { type: 'string' }, user: { type: 'string' } } as const satisfies OptionsConfig;
export const LIMIT_HELP =
  `SIZE is ${SIZE_SYNTAX}. "off" (or 0) means no limit, as in xfs_quota; "default" drops the override so the profile's limit applies again.`;
