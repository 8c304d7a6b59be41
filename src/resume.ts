/**
 * Resuming a session a holder kept through a crash (src/holder/): the native
 * session adopts the kept /dev/fuse descriptor and INIT, recovers its node
 * table from the journal's descriptors, and asks the kernel to resend the
 * requests the dead daemon had read but not answered (FUSE_NOTIFY_RESEND).
 *
 * Not built yet: resumeSession throws, and the daemon then refuses to start
 * (exit HELD) rather than mount a second time over the kept session, whose
 * processes wait in the mount until the holder is stopped.
 */
import type { MountManager } from './fuse/mount.js';
import { dropKept, type Kept } from './holder/client.js';

export type { Kept } from './holder/client.js';

/**
 * Serve `kept` in place of a fresh mount (called where the daemon would
 * mount). Owns `kept`'s descriptors from the call on, closing them on
 * failure. Resolves once the session serves, as mount.mount() does.
 */
export async function resumeSession(kept: Kept, mount: MountManager): Promise<void> {
  void mount;
  dropKept(kept);
  throw new Error('resume not built');
}
