/**
 * homesfs as a library, for the platform that starts agent commands in homes:
 * resolve a home over the platform socket, build the sealed environment, and
 * run a command in the home as its owner, without re-implementing the socket
 * protocol. `import { resolveHome, sealedEnv, execInHome } from 'homesfs'`.
 */
export { resolveHome, execInHome, applyToolsFile, ownerIdentity, findCommand, ResolveError, DEFAULT_PLATFORM_SOCKET } from './exec/run.js';
export type { ResolvedHome, ResolveHomeOptions, ExecInHome, ExecInHomeOptions, ToolsFileResult, CommandLookup } from './exec/run.js';
export { sealedEnv, baseEnv, identityEnv, envFromDump, cwdInHome, parseAssignment } from './exec/env.js';
export type { Env, CallerEnv, SealedEnvInput, OwnerIdentity } from './exec/env.js';
export { ExecPolicySchema, DEFAULT_EXEC_POLICY, DEFAULT_ALLOW_ENV, DEFAULT_PATH, DEFAULT_REDIRECT } from './exec/policy.js';
export type { ExecPolicy, ExecPolicyInput } from './exec/policy.js';
export { ControlClientError } from './control/client.js';
export { HomesError } from './errors.js';
export { ownerUserName } from './users/names.js';
