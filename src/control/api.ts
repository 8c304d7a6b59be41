/**
 * What the control socket needs from the daemon. The daemon (composition root)
 * implements it; command handlers only ever talk to this interface, so they
 * can be tested with a fake.
 */
export interface DaemonApi {
  status(): Promise<StatusReport>;
}

export interface StatusReport {
  version: string;
  pid: number;
  uptimeSec: number;
  backing: string;
  configPath: string | null;
  mount: {
    path: string;
    /** True only after the kernel's INIT and while the mount really answers. */
    mounted: boolean;
    loop: 'starting' | 'running' | 'ended';
    /** ISO 8601 time of the last liveness probe. */
    lastProbeAt: string | null;
    lastProbeOk: boolean | null;
    lastProbeError?: string;
  };
  native: {
    patch: number;
    selfCheck: 'pending' | 'ok' | 'failed';
    maxWriteRequest: number | null;
    detail?: string;
  };
  homes: Array<{
    tenant: string;
    key: string;
    scan: 'pending' | 'scanning' | 'done' | 'failed';
    bytes?: number;
    inodes?: number;
  }>;
}
