import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { notifySocket, removeStored, storeRegistration, STORED_FDS, takeStored } from '../../src/holder/fdstore.js';

/** The addon's side, recorded: each notification with its descriptors; memfds are numbers from 900. */
function fakeRaw() {
  const sent: Array<{ msg: string; fds: number[] }> = [];
  const closed: number[] = [];
  let next = 900;
  return {
    sent,
    closed,
    hs_handover_sd_notify_fds: (_s: string, msg: string, fds: number[]) => (sent.push({ msg, fds }), 0),
    hs_handover_sd_cloexec: () => {
      throw new Error('no descriptor may be touched');
    },
    hs_handover_memfd: () => next++,
    hs_handover_close: (fd: number) => (closed.push(fd), 0),
  } as const;
}

const config = { backing: '/b', mount: '/m' } as unknown as Config;

describe("systemd's fd store (src/holder/fdstore.ts)", () => {
  it('a registration removes every name first, then stores the journal and the ledgers, the registration, and the session last (a store without the session is ignored at start)', () => {
    const raw = fakeRaw();
    storeRegistration(raw as never, '/run/n', config, { configPath: null, generation: 2, epoch: 1, build: 'b', session: { fd: 10, bufsize: 4096, init: Buffer.from('init') }, journalFds: [11, 12, 13] });
    expect(raw.sent.map((s) => s.msg)).toEqual([
      'FDSTOREREMOVE=1\nFDNAME=homesfs-fuse',
      'FDSTOREREMOVE=1\nFDNAME=homesfs-registration',
      'FDSTOREREMOVE=1\nFDNAME=homesfs-journal0',
      'FDSTOREREMOVE=1\nFDNAME=homesfs-journal1',
      'FDSTOREREMOVE=1\nFDNAME=homesfs-journal2',
      'FDSTORE=1\nFDNAME=homesfs-journal0',
      'FDSTORE=1\nFDNAME=homesfs-journal1',
      'FDSTORE=1\nFDNAME=homesfs-journal2',
      'FDSTORE=1\nFDNAME=homesfs-registration',
      'FDSTORE=1\nFDNAME=homesfs-fuse',
    ]);
    expect(raw.sent.slice(5).map((s) => s.fds)).toEqual([[11], [12], [13], [900], [10]]);
    // The registration's memfd is ours to close once sent.
    expect(raw.closed).toEqual([900]);
  });

  it('the unit allows what a registration stores', () => {
    const unit = readFileSync(join(import.meta.dirname, '../../systemd/homesfs.service'), 'utf8');
    const max = Number(/^FileDescriptorStoreMax=(\d+)$/m.exec(unit)?.[1]);
    expect(max).toBeGreaterThanOrEqual(STORED_FDS);
  });

  it('a plain stop removes every name and stores nothing', () => {
    const raw = fakeRaw();
    removeStored(raw as never, '/run/n');
    expect(raw.sent.every((s) => s.msg.startsWith('FDSTOREREMOVE=1\n') && s.fds.length === 0)).toBe(true);
    expect(raw.sent.length).toBe(STORED_FDS);
  });

  it("LISTEN_* meant for another pid: nothing taken, no descriptor touched, and the variables are gone", () => {
    const raw = fakeRaw();
    const env: NodeJS.ProcessEnv = { LISTEN_PID: String(process.pid + 1), LISTEN_FDS: '4', LISTEN_FDNAMES: 'homesfs-fuse:a:b:c' };
    expect(takeStored(raw as never, config, env)).toEqual({ kind: 'none' });
    expect(env).toEqual({});
  });

  it('the notify socket: a path or an abstract name, nothing else', () => {
    expect(notifySocket({ NOTIFY_SOCKET: '/run/systemd/notify' })).toBe('/run/systemd/notify');
    expect(notifySocket({ NOTIFY_SOCKET: '@/org/freedesktop/systemd1/notify/1' })).toBe('@/org/freedesktop/systemd1/notify/1');
    expect(notifySocket({ NOTIFY_SOCKET: 'relative' })).toBeNull();
    expect(notifySocket({})).toBeNull();
  });
});
