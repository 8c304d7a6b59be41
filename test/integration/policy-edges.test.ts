import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownersFrom } from '../helpers/owner-suite.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`policy-edges integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
/** each home's owner, BASE + 41 and up (an owner belongs to one home) */
const OWNER = ownersFrom(BASE + 41, ['few', 'text', 'home', 'switch', 'gone']);

describe.skipIf(!canMount)('policy edges: inode cap, chown, UTF-8 at close and at read', () => {
  let d: RunningDaemon;

  beforeAll(async () => {
    d = await startDaemon({
      create: ['t/few', 't/text', 't/home', 't/switch', 't/gone'],
      homes: {
        't/few': { owner: OWNER.few, profile: 'few' },
        't/text': { owner: OWNER.text, profile: 'scratch' },
        't/home': { owner: OWNER.home },
        't/switch': { owner: OWNER.switch },
        't/gone': { owner: OWNER.gone },
      },
      config: {
        profiles: {
          few: { ...BUILTIN_PROFILES.home, maxHomeBytes: 0, maxInodes: 5 },
        },
      },
    });
  });

  afterAll(async () => {
    await d?.stop();
  });

  it('refuses the inode past the cap with EDQUOT and frees it on removal', async () => {
    const h = d.home('t', 'few');
    const r = await runAs(OWNER.few.uid, OWNER.few.gid, `cd ${h} && mkdir d && touch a b c d/e && (touch f 2>&1; mkdir g 2>&1); ls | wc -l; rm a && touch f && echo freed`);
    expect(r.stdout.match(/Disk quota exceeded/g)?.length).toBe(2);
    expect(r.stdout).toContain('4\nfreed\n');
    await d.waitForLog((l) => l.code === 'INODES_EXCEEDED' && l.home === 't/few');
  });

  it('lets chown to the home owner succeed and refuses chown to anyone else, even for root', async () => {
    const h = d.home('t', 'home');
    const r = await runAs(0, 0, `touch ${h}/c && chown ${OWNER.home.uid}:${OWNER.home.gid} ${h}/c && echo same-ok; chown 0:0 ${h}/c 2>&1; chown 12345 ${h}/c 2>&1; chown ${OWNER.few.uid}:${OWNER.few.gid} ${h}/c 2>&1; stat -c %u:%g ${h}/c`);
    expect(r.stdout).toContain('same-ok');
    // root, a stranger, and another home's owner
    expect(r.stdout.match(/Operation not permitted/g)?.length).toBe(3);
    expect(r.stdout.trim().split('\n').pop()).toBe(`${OWNER.home.uid}:${OWNER.home.gid}`);
  });

  it('reports EILSEQ at the close of the writer that left half a character; readers are refused until it is whole', async () => {
    const h = d.home('t', 'text');
    const py = `
import os, errno
p = '${h}/half.txt'
fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b'caf\\xc3')
try:
    os.close(fd); print('close-ok')
except OSError as e:
    print('close', errno.errorcode[e.errno])
try:
    open(p, 'rb').read(); print('read-ok')
except OSError as e:
    print('read', errno.errorcode[e.errno])
fd = os.open(p, os.O_WRONLY | os.O_APPEND)
os.write(fd, b'\\xa9!')
os.close(fd)
print(open(p, encoding='utf-8').read())
`;
    const r = await runAs(OWNER.text.uid, OWNER.text.gid, `python3 -c "${py.replace(/"/g, '\\"')}"`);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('close EILSEQ\nread EILSEQ\ncafé!\n');
    expect(readFileSync(join(d.backingOf('t', 'text'), 'half.txt'), 'utf8')).toBe('café!');
  });

  it('reports EILSEQ at the close of a writer whose ftruncate cut a character; a later whole write clears it', async () => {
    const h = d.home('t', 'text');
    const py = `
import os, errno
p = '${h}/cut.txt'
open(p, 'w', encoding='utf-8').write('a\u00e9b')
fd = os.open(p, os.O_RDWR)
os.ftruncate(fd, 2)
try:
    os.close(fd); print('close-ok')
except OSError as e:
    print('close', errno.errorcode[e.errno])
fd = os.open(p, os.O_WRONLY | os.O_APPEND)
os.write(fd, b'\\xa9')
os.close(fd); print('whole-close-ok')
print(open(p, encoding='utf-8').read())
`;
    const r = await runAs(OWNER.text.uid, OWNER.text.gid, `python3 -c "${py.replace(/"/g, '\\"')}"`);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('close EILSEQ\nwhole-close-ok\na\u00e9\n');
  });

  it('answers ENOENT (not EINVAL) to creates from a working directory inside a deleted home', async () => {
    const h = d.home('t', 'gone');
    const sig = mkdtempSync(join(tmpdir(), 'homesfs-gone-'));
    chmodSync(sig, 0o777);
    const shell = runAs(
      OWNER.gone.uid,
      OWNER.gone.gid,
      `cd ${h} && touch ${sig}/in && while [ ! -e ${sig}/go ]; do sleep 0.02; done; touch x 2>&1; mkdir y 2>&1; echo done`,
    );
    for (let i = 0; i < 500 && !existsSync(join(sig, 'in')); i++) await new Promise((r) => setTimeout(r, 20));
    const del = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'delete-home', 't/gone', '--force']);
    expect(del.code).toBe(0);
    writeFileSync(join(sig, 'go'), '');
    const r = await shell;
    rmSync(sig, { recursive: true, force: true });
    expect(r.stdout).not.toMatch(/Invalid argument/);
    expect(r.stdout.match(/No such file or directory/g)?.length).toBe(2);
    expect(r.stdout).toMatch(/done\n$/);
  });

  it('checks the close of a writer whose home became a text home while the file was open', async () => {
    // FLUSH of handles that need no check is answered in the binding; a profile
    // change must republish that for the handles already open.
    const h = d.home('t', 'switch');
    const sig = mkdtempSync(join(tmpdir(), 'homesfs-switch-'));
    chmodSync(sig, 0o777); // the home owner writes the "opened" marker here
    const py = `
import os, errno, time
fd = os.open('${h}/late.txt', os.O_CREAT | os.O_WRONLY, 0o600)
open('${sig}/opened', 'w').close()
while not os.path.exists('${sig}/go'): time.sleep(0.02)
os.write(fd, b'caf\\xc3')
try:
    os.close(fd); print('close-ok')
except OSError as e:
    print('close', errno.errorcode[e.errno])
`;
    const writer = runAs(OWNER.switch.uid, OWNER.switch.gid, `python3 -c "${py.replace(/"/g, '\\"')}"`);
    for (let i = 0; i < 500 && !existsSync(join(sig, 'opened')); i++) await new Promise((r) => setTimeout(r, 20));
    const set = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'set-profile', 't/switch', 'scratch']);
    expect(set.code).toBe(0);
    writeFileSync(join(sig, 'go'), '');
    const r = await writer;
    rmSync(sig, { recursive: true, force: true });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('close EILSEQ\n');
  });

  it('refuses to open for reading a text file placed in the backing tree that is not UTF-8', async () => {
    writeFileSync(join(d.backingOf('t', 'text'), 'latin1.txt'), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
    const r = await runAs(OWNER.text.uid, OWNER.text.gid, `cat ${d.home('t', 'text')}/latin1.txt 2>&1; echo rc=$?`);
    expect(r.stdout).toMatch(/Invalid or incomplete multibyte or wide character/);
    expect(r.stdout).toMatch(/rc=1/);
  });

  it('refuses a write in the middle of a file that would cut a character in half', async () => {
    const h = d.home('t', 'text');
    const py = `
import os, errno
p = '${h}/mid.txt'
open(p, 'w', encoding='utf-8').write('aéb')
fd = os.open(p, os.O_WRONLY)
try:
    os.pwrite(fd, b'X', 2); print('written')
except OSError as e:
    print(errno.errorcode[e.errno])
os.pwrite(fd, b'\\xc3\\xa8', 1)
os.close(fd)
print(open(p, encoding='utf-8').read())
`;
    const r = await runAs(OWNER.text.uid, OWNER.text.gid, `python3 -c "${py.replace(/"/g, '\\"')}"`);
    expect(r.stdout).toBe('EILSEQ\naèb\n');
  });
});
