import { z } from 'zod';
import { HOMES_CODES, type HomesCode } from '../errors.js';

/**
 * Wire contract of the control socket: newline-delimited JSON, one request per
 * line, one reply line per request, replies in request order.
 *
 *   request: {"id": 7, "cmd": "status", "args": {}}
 *   reply:   {"id": 7, "ok": true, "data": {...}}
 *            {"id": 7, "ok": false, "code": "BAD_REQUEST", "message": "...", "details": {...}}
 *
 * `id` is optional and echoed back verbatim (also on error replies, when the
 * line parsed far enough to find a valid one).
 *
 * Adding a command: add its argument schema and one `request(...)` entry to
 * `Request` below and its line in the command table `commands.ts` (the
 * compiler refuses a table without it).
 */

export const RequestId = z.union([z.string().max(256), z.number().finite()]);
export type RequestId = z.infer<typeof RequestId>;

function request<const K extends string, A extends z.ZodType<Record<string, unknown>>>(cmd: K, args: A) {
  return z.strictObject({
    id: RequestId.optional(),
    cmd: z.literal(cmd),
    // `args` may be omitted on the wire; handlers always receive an object.
    // `prefault` (unlike `default`) runs `{}` through the schema, so a command
    // with required arguments still rejects a request without `args`.
    args: args.prefault({} as never),
  });
}

// ---- per-command argument schemas ------------------------------------------

// Names are checked for shape only (1..256 characters); the daemon validates
// them semantically (`/`, `\`, NUL, `.`, `..`, leading `_`, UTF-8…) and answers
// INVALID_NAME & co.

/** Longest tenant, project, login, key or profile name accepted on the wire. */
export const MAX_NAME_CHARS = 256;
/** Largest uid/gid accepted (2^32 - 2: (uid_t)-1 means "unchanged" to the kernel). */
export const MAX_ID = 4_294_967_294;

export const Name = z.string().min(1).max(MAX_NAME_CHARS);
/** A home as "tenant/key": exactly one slash, neither side empty. */
export const HomeRef = z
  .string()
  .max(2 * MAX_NAME_CHARS + 1)
  .regex(/^[^/]+\/[^/]+$/, { message: 'expected "tenant/key"' });
export const HomeScope = z.enum(['project', 'tenant', 'user']);
export const Bytes = z.int().min(0); // z.int() is bounded to safe integers
export const PosixId = z.int().min(0).max(MAX_ID);
export const Owner = z.strictObject({ uid: PosixId, gid: PosixId });

function notBoth<T extends { project?: string | undefined; user?: string | undefined }>(a: T): boolean {
  return a.project === undefined || a.user === undefined;
}
const NOT_BOTH = { message: 'give either project or user, not both', path: ['user'] };

export const StatusArgs = z.strictObject({});
export const ListArgs = z.strictObject({
  /** only this tenant's homes */
  tenant: Name.optional(),
  /** only orphaned homes (project homes left unused by a home-scope change) */
  orphans: z.boolean().optional(),
});
export const UsageArgs = z.strictObject({ home: HomeRef });
export const CreateArgs = z.strictObject({
  home: HomeRef,
  profile: Name.optional(),
  budget: Bytes.optional(),
  owner: Owner.optional(),
  /** with owner: take an id outside the range or a host account above the system ids (never 0, 65534, a system id, another home's) */
  force: z.boolean().optional(),
});
/** A live limit: a number (0 = off, no limit) or null (drop the override: the profile decides again). */
export const LimitValue = Bytes.nullable();
export const SetBudgetArgs = z.strictObject({ home: HomeRef, bytes: LimitValue });
export const SetLimitsArgs = z
  .strictObject({ home: HomeRef, inodes: LimitValue.optional(), fileBytes: LimitValue.optional(), softBytes: LimitValue.optional(), softInodes: LimitValue.optional() })
  .refine((a) => a.inodes !== undefined || a.fileBytes !== undefined || a.softBytes !== undefined || a.softInodes !== undefined, {
    message: 'give at least one of inodes, fileBytes, softBytes, softInodes',
    path: ['inodes'],
  });
export const SetProfileArgs = z.strictObject({ home: HomeRef, profile: Name.nullable() });
/** The same target as `resolve` (a project and a user together): the reply shows the whole cascade. */
export const SettingsGetArgs = z.strictObject({ tenant: Name, project: Name.optional(), user: Name.optional() });
export const SettingsSetArgs = z
  .strictObject({
    tenant: Name,
    project: Name.optional(),
    user: Name.optional(),
    homeScope: HomeScope.nullable(),
    /** show what the change would leave unused, change nothing */
    dryRun: z.boolean().optional(),
    /** go ahead although homes would be left unused (else CONFIRM_REQUIRED) */
    yes: z.boolean().optional(),
  })
  .refine(notBoth, NOT_BOTH);
export const RescanArgs = z.strictObject({ home: HomeRef });
/** create: false answers NOT_FOUND (with the nearest names) for a missing home instead of making it; default true */
export const ResolveArgs = z.strictObject({ tenant: Name, project: Name, user: Name.optional(), create: z.boolean().optional() });
export const RenameArgs = z.strictObject({ tenant: Name, from: Name, to: Name, force: z.boolean().optional() });
export const DeleteProjectArgs = z.strictObject({ tenant: Name, project: Name, force: z.boolean().optional() });
export const TenantUsageArgs = z.strictObject({ tenant: Name });
/** bytes: 0 = off, null = drop the override (back to the config) */
export const SetTenantBudgetArgs = z.strictObject({ tenant: Name, bytes: Bytes.nullable() });
export const DeleteUserArgs = z.strictObject({ tenant: Name, login: Name, force: z.boolean().optional() });
export const DeleteHomeArgs = z.strictObject({ home: HomeRef, force: z.boolean().optional() });
export const DeleteTenantArgs = z.strictObject({ tenant: Name });
export const ForwardsArgs = z.strictObject({});
export const ReleaseNameArgs = z.strictObject({ home: HomeRef });
export const ReloadArgs = z.strictObject({});

// ---- the request union -------------------------------------------------------

export const Request = z.discriminatedUnion('cmd', [
  request('status', StatusArgs),
  request('list', ListArgs),
  request('usage', UsageArgs),
  request('create', CreateArgs),
  request('set-budget', SetBudgetArgs),
  request('set-limits', SetLimitsArgs),
  request('set-profile', SetProfileArgs),
  request('settings-get', SettingsGetArgs),
  request('settings-set', SettingsSetArgs),
  request('rescan', RescanArgs),
  request('resolve', ResolveArgs),
  request('rename-project', RenameArgs),
  request('rename-user', RenameArgs),
  request('delete-project', DeleteProjectArgs),
  request('delete-user', DeleteUserArgs),
  request('delete-home', DeleteHomeArgs),
  request('delete-tenant', DeleteTenantArgs),
  request('forwards', ForwardsArgs),
  request('release-name', ReleaseNameArgs),
  request('reload', ReloadArgs),
  request('tenant-usage', TenantUsageArgs),
  request('set-tenant-budget', SetTenantBudgetArgs),
]);

/** A parsed request (args filled in). */
export type Request = z.output<typeof Request>;
/** What a client may send (args optional). */
export type RequestInput = z.input<typeof Request>;
export type CommandName = Request['cmd'];
export type ArgsOf<K extends CommandName> = Extract<Request, { cmd: K }>['args'];

export const COMMAND_NAMES: readonly CommandName[] = Request.options.map((o) => o.shape.cmd.value);

export function isCommandName(s: string): s is CommandName {
  return (COMMAND_NAMES as readonly string[]).includes(s);
}

// ---- replies and codes -------------------------------------------------------

/** Codes that only the control layer produces (the rest are HomesCode). */
export const CONTROL_ONLY_CODES = {
  BAD_JSON: 'The line is not valid JSON.',
  LINE_TOO_LONG: 'The line exceeds the maximum line size; bytes up to the next newline are discarded and the connection stays usable.',
  UNKNOWN_COMMAND: '`cmd` is a string that names no command; `details.commands` lists the known ones.',
  BAD_REQUEST: 'The request does not match the schema of its command (missing/extra/ill-typed fields); `details.issues` lists each problem with its path.',
  INTERNAL: 'The handler failed unexpectedly; the daemon logged the cause (the reply stays generic) and keeps serving.',
  TIMEOUT: 'The handler did not finish within the request timeout; its result, if any, is discarded.',
} as const;

export type ControlOnlyCode = keyof typeof CONTROL_ONLY_CODES;
export type ControlCode = HomesCode | ControlOnlyCode;

/**
 * Meaning of every code a control reply can carry, for the README. HomesCodes
 * come from handlers (`HomesError`); `BUSY` is also sent (without an `id`) to a
 * connection refused because `maxConnections` are already open.
 */
export const CONTROL_CODE_TABLE: Readonly<Record<ControlCode, string>> = {
  ...CONTROL_ONLY_CODES,
  NOT_FOUND: 'The named home, tenant or entry does not exist.',
  EXISTS: 'The target already exists.',
  NOT_DIR: 'A path component is not a directory.',
  IS_DIR: 'The target is a directory.',
  NOT_EMPTY: 'The directory is not empty; on the control socket: `delete-tenant` of a tenant that still has homes (`details.homes`).',
  INVALID_NAME: 'A tenant, project, key or login fails name validation.',
  NAME_TOO_LONG: 'A name is longer than allowed.',
  NOT_UTF8_NAME: 'A name is not valid UTF-8.',
  DAEMON_TREE: 'The operation targets the daemon-owned top levels.',
  OP_REFUSED: 'The operation is refused by policy.',
  SYMLINK_ESCAPES: 'A symlink would lead outside its home.',
  CROSS_HOME: 'The operation would cross homes.',
  CROSS_DEVICE: 'The operation would cross devices.',
  QUOTA_EXCEEDED: 'The byte budget would be exceeded.',
  TENANT_QUOTA_EXCEEDED: "The tenant's total byte budget across its homes would be exceeded.",
  INODES_EXCEEDED: 'The inode budget would be exceeded.',
  FILE_TOO_LARGE: 'A file would exceed the maximum file size.',
  OPEN_FILES_EXCEEDED: "A home's (or a uid's) open-file limit is reached.",
  DAEMON_FILES_EXHAUSTED: "Every home together holds all the open files the daemon's descriptors allow beside its reserve.",
  NOT_UTF8: 'Content that must be UTF-8 is not.',
  NOT_SUPPORTED: 'The operation is not supported.',
  BAD_HANDLE: 'A handle is unknown or stale.',
  INVALID_ARGUMENT: 'An argument value is invalid.',
  ACCESS_DENIED: 'Access denied; on the control socket: the command is not served on this socket (the platform socket serves only `status` and `resolve`).',
  BUSY: 'The target is busy (open files, working directories; `details.processes` names the visible holders: pid, uid, comm, command), or the daemon is at its connection limit.',
  PASSED_THROUGH: 'Through the mount only: a text home\'s open of a file that read-only opens made before the home became a text home still hold passed through.',
  RENAME_BLOCKED: 'The rename target home already exists (renameBlocker): homes are never merged.',
  RENAMED: 'The name belonged to a home that was renamed: it stays reserved with a forward (`details.to`, `details.path`) until an admin runs `release-name` or the home is deleted; every command given the old name answers this, and `resolve` never makes a fresh home there.',
  CONFIRM_REQUIRED: 'The change would leave homes unused (`details.homes` with their sizes): send it again with `yes: true`, or `dryRun: true` to preview.',
  IO: 'An I/O error on the backing store.',
};

export const CONTROL_CODES = Object.keys(CONTROL_CODE_TABLE) as ControlCode[];

/** The code table as a Markdown table (for the README and a test that keeps it in sync). */
export function controlCodeTableMarkdown(): string {
  const rows = CONTROL_CODES.map((c) => `| \`${c}\` | ${CONTROL_CODE_TABLE[c].replace(/\|/g, '\\|')} |`);
  return ['| Code | Meaning |', '| --- | --- |', ...rows].join('\n');
}
const CONTROL_CODE_SET: ReadonlySet<string> = new Set(CONTROL_CODES);
// Every HomesCode is covered by the table (the Record type enforces it too).
for (const c of HOMES_CODES) if (!CONTROL_CODE_SET.has(c)) throw new Error(`control code table misses ${c}`);

export const ControlCodeSchema = z.string().refine((s): s is ControlCode => CONTROL_CODE_SET.has(s), {
  message: 'unknown control code',
}) as unknown as z.ZodType<ControlCode>;

export const OkReply = z.object({
  id: RequestId.optional(),
  ok: z.literal(true),
  data: z.unknown(),
});
export const ErrorReply = z.object({
  id: RequestId.optional(),
  ok: z.literal(false),
  code: ControlCodeSchema,
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export const Reply = z.discriminatedUnion('ok', [OkReply, ErrorReply]);

export type OkReply = z.infer<typeof OkReply>;
export type ErrorReply = { id?: RequestId; ok: false; code: ControlCode; message: string; details?: Record<string, unknown> };
export type Reply = OkReply | ErrorReply;

/** Default maximum request line size in bytes (the newline excluded). */
export const DEFAULT_MAX_LINE_BYTES = 64 * 1024;
