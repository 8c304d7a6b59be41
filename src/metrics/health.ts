/**
 * Whether the daemon serves its mount, from state it already keeps (the mount
 * probe's and the self-check's): what `homesctl status` exits 4 on, what
 * `/healthz` answers 503 on and what `homesfs_mount_up` says. Pure and cheap:
 * no probe, no child process per question.
 */
export interface ServingState {
  /** true only after the kernel's INIT and while the mount probes pass */
  mounted: boolean;
  loop: 'starting' | 'running' | 'ended';
  selfCheck: 'pending' | 'ok' | 'failed';
}

/** Why the daemon does not serve; empty while it does. */
export function notServingReasons(s: ServingState): string[] {
  const why: string[] = [];
  if (!s.mounted) why.push('not mounted');
  if (s.loop !== 'running') why.push(`FUSE loop ${s.loop}`);
  if (s.selfCheck === 'failed') why.push('native self-check failed');
  return why;
}
