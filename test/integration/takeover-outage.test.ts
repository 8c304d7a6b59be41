import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canMount, HOMESFS, runAsync, skipReason, startDaemon } from '../helpers/daemon.js';

/**
 * The edges of live upgrade and crash survival an admin meets in a shell
 * (issue 36, point 5): the successor `homesfs reload` starts logs where the
 * daemon logs, not into the shell that ran the reload; the takeover socket
 * does not outlive its daemon, and a `--takeover` with no daemon says so;
 * `homesctl status` in the outage after a kill says the session is kept.
 */

if (!canMount) console.warn(`takeover outage integration suite skipped: ${skipReason}`);

const mounted = (p: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

describe.skipIf(!canMount)('live upgrade and crash survival from a shell', () => {
  it('a clean stop leaves no takeover.sock; --takeover with no daemon, or only a stale socket, says no daemon serves the mount (exit 12)', async () => {
    const d = await startDaemon({ create: ['t/h'] });
    const config = join(d.dir, 'config.json');
    const sock = join(d.dir, 'run', 'takeover.sock');
    try {
      expect(existsSync(sock)).toBe(true);
      expect(await d.stopKeep()).toBe(0);
      expect(existsSync(sock)).toBe(false);

      // No daemon: --takeover says so, with the mount and the socket, and exits 12.
      const none = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', config, '--takeover']);
      expect(none.code, none.stderr).toBe(12);
      expect(none.stderr).toContain(`no daemon serves ${d.mount} (no socket at ${sock}): start it with \`homesfs serve\``);
      // A socket file nobody listens on (what a killed daemon leaves): the same, not a raw errno 111.
      spawnSync('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(${JSON.stringify(sock)})`]);
      const stale = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', config, '--takeover']);
      expect(stale.code, stale.stderr).toBe(12);
      expect(stale.stderr).toContain(`no daemon serves ${d.mount} (nothing listens on ${sock}): start it with \`homesfs serve\``);
      expect(stale.stderr).not.toMatch(/errno 111/);
      expect(mounted(d.mount)).toBe(false);
    } finally {
      await d.stop();
    }
  }, 60_000);
});
