/**
 * How homesctl shows the daemon's replies to people: the tables of list, top
 * and status, the key/value blocks of one home, a tenant or a settings
 * cascade, the one-line outcomes of renames and deletes, and the order list
 * sorts homes in. Everything here is a pure function from reply data to text,
 * with every daemon-supplied string passed through `clean` so a name cannot
 * drive the terminal; nothing here parses arguments or talks to a socket,
 * which keeps the look of the output reviewable (and testable) in one place.
 */
import type { DeleteResult, HolderInfo, HomeInfo, LimitSource, ProcessInfo, RenameResult, SettingsView, StatusReport, TenantUsage } from '../../control/api.js';
import { formatBytes, formatSignedBytes } from '../size.js';

/** Escape control characters so daemon-supplied names cannot drive the terminal. */
export function clean(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
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

export function keyValues(pairs: ReadonlyArray<readonly [string, string]>): string {
  const w = Math.max(...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(w)} ${clean(v)}`).join('\n');
}

export function homeName(h: { tenant: string; key: string }): string {
  return clean(`${h.tenant}/${h.key}`);
}

export function formatOwner(o: { uid: number; gid: number }): string {
  return `${o.uid}:${o.gid}`;
}

export function signed(n: number): string {
  return n > 0 ? `+${n}` : String(n);
}

export function formatLimit(n: number): string {
  return n === 0 ? 'off' : formatBytes(n);
}

const PROFILE_SOURCE: Readonly<Record<HomeInfo['profileSource'], string>> = {
  override: 'set by set-profile',
  home: "from the config's home entry",
  tenant: "the tenant's default",
  default: 'the configured default',
};

/** "2.0 GiB (profile home, the configured default)" or "20.0 MiB (override; profile home: 2.0 GiB)". */
export function limitWithSource(value: string, source: LimitSource, h: HomeInfo, profileValue: string): string {
  return source === 'override'
    ? `${value} (override; profile ${clean(h.profile)}: ${profileValue})`
    : `${value} (profile ${clean(h.profile)}, ${PROFILE_SOURCE[h.profileSource]})`;
}

function homeFlags(h: HomeInfo): string {
  return h.flags.length > 0 ? h.flags.join(',') : '-';
}

/** The table of list and top; `rates` (bytes/s since the last frame) adds a RATE column. */
export function renderList(homes: HomeInfo[], rates?: ReadonlyMap<string, number>): string {
  if (homes.length === 0) return 'No homes.\n';
  const star = (s: LimitSource) => (s === 'override' ? '*' : '');
  const headers = ['HOME', 'OWNER', 'PROFILE', 'USED', 'BUDGET', 'SOFT', 'USE%', 'INODES', ...(rates ? ['RATE'] : []), 'FLAGS'];
  const rows = homes.map((h) => [
    `${h.tenant}/${h.key}`,
    formatOwner(h.owner),
    h.profile,
    formatBytes(h.bytes),
    formatLimit(h.budget) + star(h.limitSources.budget),
    (h.soft.bytes === 0 ? '-' : formatBytes(h.soft.bytes)) + star(h.soft.sources.bytes),
    h.percent === null ? '-' : `${h.percent.toFixed(1)}%`,
    (h.inodeCap === 0 ? String(h.inodes) : `${h.inodes}/${h.inodeCap}`) + star(h.limitSources.inodeCap),
    ...(rates ? [rateOf(rates.get(`${h.tenant}/${h.key}`))] : []),
    homeFlags(h),
  ]);
  const right = new Set([3, 4, 5, 6, 7, ...(rates ? [8] : [])]);
  const overridden = homes.some((h) => h.limitSources.budget === 'override' || h.limitSources.inodeCap === 'override' || h.soft.sources.bytes === 'override');
  return formatTable(headers, rows, right) + '\n' + (overridden ? '* live override (set-budget, set-limits); other limits come from the profile\n' : '');
}

function rateOf(r: number | undefined): string {
  if (r === undefined) return '-';
  if (r === 0) return '0';
  return `${formatSignedBytes(Math.round(r))}/s`;
}

/** The soft limits (warn thresholds) of a home and whether usage is above them. */
export function softText(h: HomeInfo): string {
  const s = h.soft;
  const bytes = limitWithSource(s.bytes === 0 ? 'off' : `${formatBytes(s.bytes)} (${s.bytes} bytes)`, s.sources.bytes, h, formatLimit(s.profile.bytes));
  const inodes = limitWithSource(s.inodes === 0 ? 'off' : String(s.inodes), s.sources.inodes, h, s.profile.inodes === 0 ? 'off' : String(s.profile.inodes));
  return `bytes ${bytes}${s.overBytes ? ' — EXCEEDED' : ''}; inodes ${inodes}${s.overInodes ? ' — EXCEEDED' : ''}`;
}

export function renderHome(h: HomeInfo): string {
  const pct = h.percent !== null ? `, ${h.percent}% of the budget` : '';
  const inodeText = (n: number) => (n === 0 ? 'off' : String(n));
  const flags = h.flags.length > 0 ? h.flags.join(', ') : '-';
  return keyValues([
    ['Home', `${h.tenant}/${h.key}`],
    ['Path', h.path],
    ['Scope', h.scope],
    ['Owner', formatOwner(h.owner)],
    ['Profile', `${h.profile} (${PROFILE_SOURCE[h.profileSource]})`],
    ['Used', `${formatBytes(h.bytes)} (${h.bytes} bytes${pct})`],
    ['Budget', limitWithSource(h.budget === 0 ? 'off' : `${formatBytes(h.budget)} (${h.budget} bytes)`, h.limitSources.budget, h, formatLimit(h.profileLimits.budget))],
    ['Inodes', `${h.inodes} used; cap ${limitWithSource(inodeText(h.inodeCap), h.limitSources.inodeCap, h, inodeText(h.profileLimits.inodeCap))}`],
    ['File cap', limitWithSource(formatLimit(h.fileCap), h.limitSources.fileCap, h, formatLimit(h.profileLimits.fileCap))],
    ['Soft limits', softText(h)],
    ['Tenant total', `${formatBytes(h.tenantBytes)} of ${h.tenantBudget === 0 ? 'no tenant budget' : formatBytes(h.tenantBudget)}`],
    ['In use', `${h.openHandles} open file${h.openHandles === 1 ? '' : 's'}${h.maxOpenFiles ? ` (limit ${h.maxOpenFiles})` : ''}, ${h.cwdProcesses} working director${h.cwdProcesses === 1 ? 'y' : 'ies'}`],
    ['Scan', h.scan],
    ['Orphan', h.orphan ? 'yes (its project now resolves to a shared home; delete-home removes it)' : 'no'],
    ['Flags', flags],
  ]);
}

export function renderTenant(t: TenantUsage): string {
  const budget = t.budget === 0 ? 'off' : `${formatBytes(t.budget)} (${t.budget} bytes, ${t.budgetSource === 'override' ? 'live override' : 'config'})`;
  const over = t.budget > 0 && t.bytes > t.budget ? ' (over budget: its homes cannot grow until it is back under)' : '';
  return (
    keyValues([
      ['Tenant', t.tenant],
      ['Used', `${formatBytes(t.bytes)} (${t.bytes} bytes)${over}`],
      ['Budget', budget],
      ['Homes', t.homes.map((h) => `${h.key} ${formatBytes(h.bytes)}`).join(', ') || '(none loaded)'],
    ]) + '\n'
  );
}

export function renderSettings(v: SettingsView): string {
  const pairs: Array<[string, string]> = [
    ['Tenant', v.tenant],
    ['Tenant default', v.tenantDefault ?? '(unset)'],
  ];
  if (v.project) pairs.push([`Project ${v.project.name}`, v.project.value ?? '(unset)']);
  if (v.user) pairs.push([`User ${v.user.login}`, v.user.value ?? '(unset)']);
  if (v.resolved) pairs.push(['Resolves to', `${v.resolved.scope} (from ${v.resolved.source}), key ${v.resolved.key}`]);
  let out = keyValues(pairs) + '\n';
  if (v.cascade) {
    const label = (l: string) => (l === 'user' ? `user ${v.user?.login ?? ''}` : l === 'project' ? `project ${v.project?.name ?? ''}` : l === 'tenant' ? 'tenant default' : 'built-in default');
    out +=
      'Cascade (the first level with a value decides):\n' +
      formatTable(
        ['  LEVEL', 'VALUE', ''],
        v.cascade.map((c, i) => [`  ${i + 1}. ${label(c.level)}`, c.value ?? '(unset)', c.decides ? '<- decides' : '']),
      )
        .split('\n')
        .map((l) => l.trimEnd())
        .join('\n') +
      '\n';
  }
  return out;
}

export function renderRename(r: RenameResult): string {
  const inUse: string[] = [];
  if (r.openFiles > 0) inUse.push(`${r.openFiles} open file${r.openFiles === 1 ? '' : 's'}`);
  if (r.cwdProcesses > 0) inUse.push(`${r.cwdProcesses} working director${r.cwdProcesses === 1 ? 'y' : 'ies'}`);
  return (
    `Renamed ${clean(r.from)} to ${clean(r.to)}${inUse.length > 0 ? ` (forced while in use: ${inUse.join(', ')})` : ''}.\n` +
    `${clean(r.from)} stays reserved: resolve answers RENAMED with the new name until: homesctl release-name ${clean(r.from)}\n`
  );
}

/** PID UID COMMAND rows, indented, for deletes and busy refusals; `how` adds what each holds. */
export function processTable(ps: ReadonlyArray<ProcessInfo | HolderInfo>, how = false): string {
  const holds = (p: ProcessInfo | HolderInfo): string => {
    if (!('cwd' in p)) return '';
    const parts = [...(p.cwd ? ['working directory'] : []), ...(p.openFiles > 0 ? [`${p.openFiles} open file${p.openFiles === 1 ? '' : 's'}`] : [])];
    return parts.join(', ');
  };
  const headers = ['  PID', 'UID', ...(how ? ['HOLDS'] : []), 'COMMAND'];
  return formatTable(headers, ps.map((p) => [`  ${p.pid}`, String(p.uid), ...(how ? [holds(p)] : []), p.command || p.comm]), new Set([0])) + '\n';
}

export function renderDelete(r: DeleteResult): string {
  if (r.deleted === null) return `Nothing deleted${r.deleteNote ? `: ${clean(r.deleteNote)}` : '.'}\n`;
  const freed = r.bytes !== undefined ? ` (${formatBytes(r.bytes)} freed)` : '';
  let out = `Deleted ${clean(r.deleted)}${freed}.${r.deleteNote ? ` ${clean(r.deleteNote)}` : ''}\n`;
  if (r.releasedNames && r.releasedNames.length > 0) out += `Released the old names that forwarded to it: ${r.releasedNames.map(clean).join(', ')}.\n`;
  const ps = r.ownerProcesses ?? [];
  if (ps.length > 0) {
    out +=
      `${ps.length}${ps.length >= 50 ? ' or more' : ''} process${ps.length === 1 ? '' : 'es'} still run${ps.length === 1 ? 's' : ''} as its owner uid ${r.ownerUid ?? '?'} ` +
      '(they keep running; the uid is retired, never given to a home again):\n' +
      processTable(ps);
  }
  return out;
}

/** [kind, what the binding did] rows of the native counters; empty when none are reported. */
function nativeRows(n: StatusReport['native']): Array<[string, string]> {
  const rows: Array<[string, string]> = [];
  const f = n.fastPath;
  if (f) {
    rows.push(
      ['getattr', `${f.answered} answered (${f.negative} ENOENT/ENOTDIR, ${f.homeAnswered ?? 0} of homes themselves), ${f.fallbacks} to JS`],
      ['directories kept', `${f.dirCacheHits ?? 0} getattrs below a kept directory, ${f.dirCacheWalks ?? 0} walks, ${f.dirCacheHeld ?? 0} kept now`],
      ['fgetattr', `${f.fgetattrAnswered ?? 0} answered, ${f.fgetattrFallbacks ?? 0} to JS`],
      ['readdir', `${f.readdirAnswered} answered, ${f.readdirFallbacks} to JS`],
      ['unlink', `${f.unlinkAnswered} done, ${f.unlinkFallbacks} to JS`],
      ['open', `${f.openAnswered} answered (${f.openClosedNatively ?? 0} closed before the daemon adopted them), ${f.openFallbacks} to JS`],
      ['create', `${f.createAnswered} made (${f.createClosedNatively ?? 0} closed before the daemon adopted them), ${f.createFallbacks} to JS, ${f.createSlotAsks ?? 0} asks for more slots`],
      ['mkdir', `${f.mkdirAnswered ?? 0} made, ${f.mkdirFallbacks ?? 0} to JS`],
      ['symlink', `${f.symlinkAnswered ?? 0} made, ${f.symlinkFallbacks ?? 0} to JS`],
      ['link', `${f.linkAnswered ?? 0} made, ${f.linkFallbacks ?? 0} to JS`],
      ['rmdir', `${f.rmdirAnswered ?? 0} removed, ${f.rmdirFallbacks ?? 0} to JS`],
      ['rename', `${f.renameAnswered ?? 0} done, ${f.renameFallbacks ?? 0} to JS`],
      ['setattr', `utimens ${f.utimensAnswered}, chmod ${f.chmodAnswered}, chown ${f.chownAnswered} done; ${f.setattrFallbacks} to JS`],
      ['write', `${f.writesDecided ?? 0} decisions made, ${f.writeDecisionFallbacks ?? 0} to JS`],
      ['ftruncate', `${f.truncatesDecided ?? 0} done, ${f.truncateFallbacks ?? 0} to JS`],
      ['in flight', `${f.inFlight ?? 0} native operation${f.inFlight === 1 ? '' : 's'} holding a home (${f.retiredHomes ?? 0} withdrawn home${f.retiredHomes === 1 ? '' : 's'} still held)`],
    );
  }
  if (n.releasesAnswered !== undefined) rows.push(['release', `${n.releasesAnswered} answered`]);
  if (n.noFlush !== undefined) rows.push(['no FLUSH', `${n.noFlush.opens} opens without FLUSH (${n.noFlush.flushes} FLUSH requests)`]);
  if (n.singleReader !== undefined) {
    rows.push(['single reader', `${n.singleReader.handoffs} handoffs (${n.singleReader.readWaits ?? 0} before reads from disk), ${n.singleReader.revocations} taken by the watchdog`]);
  }
  const pt = n.protocol.passthrough;
  if (pt?.negotiated) {
    rows.push(['passthrough', `${pt.opens} opens passed through, ${pt.opensDirect} with direct I/O, ${pt.refused} refused; ${pt.files} files now`]);
  }
  if (n.invalidations !== undefined) {
    const i = n.invalidations;
    rows.push(['invalidate', `${i.queued} kernel cache invalidations queued: ${i.sent} dropped something, ${i.notCached} found nothing cached, ${i.failed} failed, ${i.pending} pending`]);
  }
  return rows;
}

/** Requests the binding answered itself and those it handed to JavaScript, summed over every kind. */
function nativeTotals(n: StatusReport['native']): { answered: number; toJs: number } | null {
  const f = n.fastPath;
  if (!f && n.releasesAnswered === undefined) return null;
  const answered = f ? f.answered + (f.fgetattrAnswered ?? 0) + f.readdirAnswered + f.unlinkAnswered + f.openAnswered + f.createAnswered + (f.mkdirAnswered ?? 0) + (f.symlinkAnswered ?? 0) + (f.linkAnswered ?? 0) + (f.rmdirAnswered ?? 0) + (f.renameAnswered ?? 0) + f.utimensAnswered + f.chmodAnswered + f.chownAnswered + (f.writesDecided ?? 0) + (f.truncatesDecided ?? 0) : 0;
  const toJs = f ? f.fallbacks + (f.fgetattrFallbacks ?? 0) + f.readdirFallbacks + f.unlinkFallbacks + f.openFallbacks + f.createFallbacks + (f.mkdirFallbacks ?? 0) + (f.symlinkFallbacks ?? 0) + (f.linkFallbacks ?? 0) + (f.rmdirFallbacks ?? 0) + (f.renameFallbacks ?? 0) + f.setattrFallbacks + (f.writeDecisionFallbacks ?? 0) + (f.truncateFallbacks ?? 0) : 0;
  return { answered: answered + (n.releasesAnswered ?? 0), toJs };
}

export function renderStatus(s: StatusReport, verbose = false): string {
  const probe =
    s.mount.lastProbeAt === null
      ? 'never'
      : `${s.mount.lastProbeAt} (${s.mount.lastProbeOk ? 'ok' : `failed${s.mount.lastProbeError ? `: ${s.mount.lastProbeError}` : ''}`})`;
  const nativeExtra = [`ABI ${s.native.abi}`];
  const p = s.native.protocol;
  if (p.minor > 0) nativeExtra.push(`FUSE 7.${p.minor}`);
  // Older daemons report no passthrough.
  if (p.passthrough?.negotiated) nativeExtra.push(p.passthrough.active ? 'passthrough' : 'passthrough off');
  // The admin turned enable_uring on; the daemon still reads /dev/fuse (README, "FUSE over io_uring").
  if (p.ioUringOffered) nativeExtra.push('io_uring offered, not taken');
  if (s.native.maxWriteRequest !== null) nativeExtra.push(`max write ${formatBytes(s.native.maxWriteRequest)}`);
  if (s.native.detail) nativeExtra.push(s.native.detail);
  const totals = nativeTotals(s.native);
  const counted = totals ? `; ${totals.answered} requests answered natively, ${totals.toJs} handed to JS${verbose ? '' : ' (--verbose: per kind)'}` : '';
  const rows = verbose ? nativeRows(s.native) : [];
  const nativeBlock =
    rows.length > 0
      ? '\n\nNative counters (answered in the binding; "to JS": handed to the daemon):\n' +
        formatTable(['  KIND', 'COUNTS'], rows.map(([k, v]) => [`  ${k}`, v]))
          .split('\n')
          .slice(1)
          .join('\n')
      : '';
  const head = keyValues([
    ['Mount', s.mount.path],
    ['Mounted', s.mount.mounted ? 'yes' : 'no'],
    ['Loop', s.mount.loop],
    ['Last probe', probe],
    ['Native', `${s.native.selfCheck} (${nativeExtra.join(', ')})${counted}`],
    ['Uptime', formatDuration(s.uptimeSec)],
    ['Daemon', `homesfs ${s.version} (build ${s.build}), pid ${s.pid}`],
    ...(s.session
      ? ([['Session', `generation ${s.session.generation}, ${s.session.startMode}${s.session.lastHandoverPauseMs !== null ? `, last handover paused the mount ${s.session.lastHandoverPauseMs} ms` : ''}`]] as Array<[string, string]>)
      : []),
    ...(s.holder
      ? ([['Holder', holderLine(s.holder)]] as Array<[string, string]>)
      : []),
    ['Backing', s.backing],
    ['Config', s.configPath ?? '(none)'],
    ...(s.limits
      ? ([
          [
            'Descriptors',
            `${s.limits.descriptorsInUse ?? '?'} in use of ${s.limits.nofile.soft} (RLIMIT_NOFILE, hard ${s.limits.nofile.hard}; ${s.limits.nofile.configured === null ? 'the hard limit' : `limits.nofile ${s.limits.nofile.configured}`}), ${s.limits.reserveFiles} reserved for the daemon`,
          ],
          ['Open files', `${s.limits.openFiles} of ${s.limits.openFilesCap} across all homes; per uid ${s.limits.openFilesPerUid === 0 ? 'off' : s.limits.openFilesPerUid}`],
          ...(s.limits.nofile.warning ? [['Warning', s.limits.nofile.warning] as [string, string]] : []),
        ] as Array<[string, string]>)
      : []),
    ...(s.lastReload ? [['Last reload', `${s.lastReload.at} (${s.lastReload.ok ? 'ok' : 'refused'}: ${s.lastReload.message})`] as [string, string]] : []),
  ]);
  const homes =
    s.homes.length === 0
      ? 'No homes.'
      : formatTable(
          ['TENANT', 'KEY', 'SCAN', 'BYTES', 'INODES', 'OPEN'],
          s.homes.map((h) => [
            h.tenant,
            h.key,
            h.scan,
            formatBytes(h.bytes),
            h.inodes === undefined ? '-' : String(h.inodes),
            h.openFiles === undefined ? '-' : `${h.openFiles}/${h.maxOpenFiles === 0 || h.maxOpenFiles === undefined ? 'off' : h.maxOpenFiles}`,
          ]),
          new Set([3, 4, 5]),
        );
  return `${head}${nativeBlock}\n\n${homes}\n`;
}

/** The orders list and top can sort homes in (--sort). */
export const SORTS = ['name', 'used', 'percent', 'busy'] as const;

export function sortHomes(homes: HomeInfo[], sort: (typeof SORTS)[number], rates?: ReadonlyMap<string, number>): HomeInfo[] {
  const id = (h: HomeInfo) => `${h.tenant}/${h.key}`;
  const byName = (a: HomeInfo, b: HomeInfo) => id(a).localeCompare(id(b));
  const cmp: Record<(typeof SORTS)[number], (a: HomeInfo, b: HomeInfo) => number> = {
    name: byName,
    used: (a, b) => b.bytes - a.bytes || byName(a, b),
    percent: (a, b) => (b.percent ?? -1) - (a.percent ?? -1) || b.bytes - a.bytes || byName(a, b),
    busy: (a, b) =>
      Math.abs(rates?.get(id(b)) ?? 0) - Math.abs(rates?.get(id(a)) ?? 0) ||
      b.openHandles + b.cwdProcesses - (a.openHandles + a.cwdProcesses) ||
      b.bytes - a.bytes ||
      byName(a, b),
  };
  return [...homes].sort(cmp[sort]);
}

/** Crash survival: who keeps a copy of the session, and whether it is this daemon's. */
function holderLine(h: NonNullable<StatusReport['holder']>): string {
  const who =
    h.keeper === 'systemd'
      ? `systemd's fd store, ${h.registered ? 'this session stored' : 'this session NOT stored'}`
      : h.pid === null
        ? 'no holder runs'
        : `pid ${h.pid}, ${h.registered ? 'this session registered' : 'this session NOT registered'}`;
  return `${who}${h.crashSurvival ? '' : ' (crashSurvival off)'}`;
}
