import { spawn } from 'node:child_process';
import type { Logger } from '../log.js';

/**
 * Tell systemd about our state (sd_notify) when it asked for it (Type=notify
 * sets NOTIFY_SOCKET). Node cannot send a datagram on a Unix socket, so the
 * message goes through `systemd-notify`, run as our direct child. It sends the
 * message as from its parent (root may name the pid in SCM_CREDENTIALS), so
 * systemd takes it as the main process's: the unit's NotifyAccess=exec accepts
 * it (and nothing from other processes in the unit's cgroup).
 * systemd-notify waits until systemd has processed the message (a barrier), so
 * the message is never lost to the race of a sender that exited first.
 * Resolves whether or not it worked: a failure is logged, never fatal.
 */
export function notifySystemd(log: Logger, args: string[]): Promise<boolean> {
  if (!process.env.NOTIFY_SOCKET) return Promise.resolve(false);
  return new Promise((resolve) => {
    let stderr = '';
    const child = spawn('systemd-notify', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      log.warn({ err: err.message, args }, 'systemd-notify could not run (install systemd, or drop Type=notify)');
      resolve(false);
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) log.debug({ args }, 'notified systemd');
      else log.warn({ code, args, stderr: stderr.trim() }, 'systemd-notify failed');
      resolve(code === 0);
    });
  });
}
