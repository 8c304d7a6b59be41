import { describe, expect, it } from 'vitest';
import { deadMountVerdict, topMountType, type Probe } from '../../src/fuse/dead-mount.js';

/**
 * A fresh start clears only a dead mount of ours: fuse.homesfs answering
 * ENOTCONN. A mount that does not answer is kept by something (its processes
 * wait in it): never cleared. Anything else at the mount point refuses the start.
 */
describe('dead-mount verdict', () => {
  const M = '/homes';
  const enotconn: Probe = { ok: false, code: 'ENOTCONN' };
  const cases: Array<[string, string | null, Probe | null, 'none' | 'clear' | 'refuse']> = [
    ['nothing mounted', null, null, 'none'],
    ['our dead mount', 'fuse.homesfs', enotconn, 'clear'],
    ['our mount, kept by a holder or a store (statfs waits)', 'fuse.homesfs', { ok: false, timedOut: true }, 'refuse'],
    ['our mount, alive', 'fuse.homesfs', { ok: true, fType: 0x65735546 }, 'refuse'],
    ['our mount, another error', 'fuse.homesfs', { ok: false, code: 'EIO' }, 'refuse'],
    ["another FUSE filesystem's dead mount", 'fuse.sshfs', enotconn, 'refuse'],
    ['a bare fuse mount', 'fuse', enotconn, 'refuse'],
    ['a disk', 'ext4', null, 'refuse'],
  ];
  for (const [what, fstype, probe, action] of cases) {
    it(`${what}: ${action}`, () => {
      expect(deadMountVerdict(M, fstype, probe).action).toBe(action);
    });
  }

  it('reads the top-most mount at the point from mountinfo (octal escapes decoded)', () => {
    const info = [
      '22 1 0:21 / / rw - ext4 /dev/vda rw',
      '40 22 0:40 / /homes rw,nosuid - tmpfs tmpfs rw',
      '41 40 0:41 / /homes rw,nosuid,nodev - fuse.homesfs homesfs rw,user_id=0',
      '42 22 0:42 / /a\\040b rw - fuse.homesfs homesfs rw',
    ].join('\n');
    expect(topMountType(info, '/homes')).toBe('fuse.homesfs');
    expect(topMountType(info, '/a b')).toBe('fuse.homesfs');
    expect(topMountType(info, '/other')).toBeNull();
  });
});
