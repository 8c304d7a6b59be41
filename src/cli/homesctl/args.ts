/**
 * The words of a homesctl command line, checked: the global options, a strict
 * node:util parse that turns its messages into the admin's mistake ("unknown
 * option '--budgit' (did you mean '--budget'?)"), and the small parsers the
 * commands share for HOME, sizes and limits, owners, required options and the
 * client-side view options of list and top. Every mistake is a UsageError
 * (exit 2, with a "Try 'homesctl CMD --help'" hint); the command table and the
 * help texts build on these helpers and nothing here knows which commands exist.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { MAX_ID } from '../../control/protocol.js';
import { parseLimit, SizeSyntaxError } from '../size.js';
import { DEFAULT_SOCKETS } from '../sockets.js';
import { clean, SORTS } from './render.js';

export type OptionsConfig = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

export const DEFAULT_SOCKET = DEFAULT_SOCKETS.socket;
export const DEFAULT_TIMEOUT_MS = 10_000;

/** The options every command takes, before its name or after it. */
export const GLOBAL_OPTIONS = {
  socket: { type: 'string' },
  config: { type: 'string' },
  json: { type: 'boolean' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'V' },
} as const satisfies OptionsConfig;

/** Global options whose value is the next word: skipped when looking for the command name. */
export const GLOBAL_TAKES_VALUE = new Set(['--socket', '--config', '--timeout']);

export class UsageError extends Error {
  /** The command whose usage was wrong, for the "Try 'homesctl CMD --help'" hint. */
  readonly command: string | undefined;
  constructor(message: string, command?: string) {
    super(message);
    this.command = command;
  }
}

export function parseStrict(args: string[], options: OptionsConfig, allowPositionals: boolean, command?: string): { values: Values; positionals: string[] } {
  const where = command ? `${command}: ` : '';
  // node:util's parser takes "-5" for an option and answers with a message
  // about '--' quoting; a negative size or count is the admin's real mistake.
  for (const a of args) {
    if (a === '--') break;
    if (/^-[0-9.]/.test(a)) throw new UsageError(`${where}'${clean(a)}' is negative: sizes and counts are 0 or more (off = no limit)`, command);
  }
  try {
    const r = parseArgs({ args, options, strict: true, allowPositionals });
    return { values: r.values as Values, positionals: r.positionals };
  } catch (err) {
    const e = err as Error & { code?: string };
    const unknown = /^Unknown option '([^']*)'/.exec(e.message);
    if (e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && unknown) {
      const opt = unknown[1]!;
      const known = Object.entries(options).flatMap(([n, o]) => [`--${n}`, ...(o.short ? [`-${o.short}`] : [])]);
      throw new UsageError(`${where}unknown option '${clean(opt)}'${hint(opt, known)}`, command);
    }
    if (e.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') throw new UsageError(`${where}unexpected argument`, command);
    const missing = /^Option '(-[^' ]*)[^']*' argument (?:missing|is ambiguous)/.exec(e.message);
    if (missing) throw new UsageError(`${where}${missing[1]} needs a value`, command);
    throw new UsageError(`${where}${clean(e.message)}`, command);
  }
}

/** Where the command word is: after the global options. */
export function commandIndex(argv: string[]): number {
  let i = 0;
  while (i < argv.length && argv[i] !== '--' && argv[i]!.startsWith('-') && argv[i] !== '-') i += GLOBAL_TAKES_VALUE.has(argv[i]!) ? 2 : 1;
  return i;
}

export function homeArg(s: string, command: string): string {
  if (!/^[^/]+\/[^/]+$/.test(s)) throw new UsageError(`${command}: HOME must be "tenant/key", got '${clean(s)}'`, command);
  return s;
}

export function requiredOpt(v: Values, name: string, command: string): string {
  const x = v[name];
  if (typeof x !== 'string') throw new UsageError(`${command}: --${name} is required`, command);
  return x;
}

export function settingsTarget(v: Values, command: string, allowBoth: boolean): { tenant: string; project?: string; user?: string } {
  if (!allowBoth && typeof v.project === 'string' && typeof v.user === 'string') throw new UsageError(`${command}: give --project or --user, not both`, command);
  const t: { tenant: string; project?: string; user?: string } = { tenant: requiredOpt(v, 'tenant', command) };
  if (typeof v.project === 'string') t.project = v.project;
  if (typeof v.user === 'string') t.user = v.user;
  return t;
}

export function withForce<T extends object>(a: T, v: Values): T & { force?: boolean } {
  return v.force === true ? { ...a, force: true } : a;
}

/** SIZE|off|default (or N|off|default): a number (0 = off) or null (back to the profile). */
export function limitArg(text: string, kind: 'size' | 'count', command: string, what: string): number | null {
  try {
    return parseLimit(text, kind);
  } catch (err) {
    if (err instanceof SizeSyntaxError) throw new UsageError(`${command}: ${what}: ${clean(err.message)}; or off (no limit) or default (the profile's)`, command);
    throw err;
  }
}

/** Kept for callers of the old API: a byte count or "off" (0). Throws UsageError. */
export function parseSize(s: string, command = 'set-budget', what = 'SIZE'): number {
  const n = limitArg(s, 'size', command, what);
  if (n === null) throw new UsageError(`${command}: ${what}: "default" is not a size here`, command);
  return n;
}

export function parseOwner(s: string, command: string): { uid: number; gid: number } {
  const m = /^([0-9]{1,10}):([0-9]{1,10})$/.exec(s);
  const uid = m ? Number(m[1]) : NaN;
  const gid = m ? Number(m[2]) : NaN;
  if (!m || uid > MAX_ID || gid > MAX_ID) throw new UsageError(`${command}: --owner must be UID:GID with numbers 0..${MAX_ID}, got '${clean(s)}'`, command);
  return { uid, gid };
}

function positiveNumber(v: Values, name: string, command: string, integer: boolean): number | undefined {
  const x = v[name];
  if (typeof x !== 'string') return undefined;
  const n = Number(x);
  if (!/^[0-9]*\.?[0-9]+$/.test(x) || !(n > 0) || (integer && !Number.isSafeInteger(n))) {
    throw new UsageError(`${command}: --${name} must be a positive ${integer ? 'whole number' : 'number'}, got '${clean(x)}'`, command);
  }
  return n;
}

/** The client-side view options of list/top, checked. */
export function listView(v: Values): { sort: (typeof SORTS)[number]; limit: number | undefined; intervalMs: number; count: number } {
  const sort = typeof v.sort === 'string' ? v.sort : 'name';
  if (!(SORTS as readonly string[]).includes(sort)) throw new UsageError(`list: --sort must be ${SORTS.join(', ')}; got '${clean(sort)}'${hint(sort, SORTS)}`, 'list');
  const watching = v.watch === true;
  for (const o of ['interval', 'count'] as const) if (!watching && v[o] !== undefined) throw new UsageError(`list: --${o} goes with --watch`, 'list');
  if (watching && v.json === true) throw new UsageError('list: --watch redraws a table for people; for scripts, run list --json in a loop', 'list');
  const interval = positiveNumber(v, 'interval', 'list', false) ?? 2;
  if (interval < 0.1) throw new UsageError('list: --interval must be at least 0.1 seconds', 'list');
  return {
    sort: sort as (typeof SORTS)[number],
    limit: positiveNumber(v, 'limit', 'list', true),
    intervalMs: Math.round(interval * 1000),
    count: positiveNumber(v, 'count', 'list', true) ?? Infinity,
  };
}

/** Levenshtein distance, for "did you mean". */
function distance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return d[b.length]!;
}

/** The closest candidate to a mistyped word, if close enough to be a typo (or a prefix of one). */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = c.startsWith(word) && word.length >= 2 ? 0.5 : distance(word.toLowerCase(), c.toLowerCase());
    if (d < bestD) {
      best = c;
      bestD = d;
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(word.length / 3)) ? best : undefined;
}

export function hint(word: string, candidates: readonly string[]): string {
  const c = closest(word, candidates);
  return c === undefined ? '' : ` (did you mean '${c}'?)`;
}
