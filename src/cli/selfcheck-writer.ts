// Child process of the daemon: writes 1 MiB in a single write(2) to the
// self-check file so the daemon can see how the kernel splits it (see
// fuse/selfcheck.ts). It runs outside the daemon's event loop.
import { closeSync, openSync, writeSync } from 'node:fs';

const [path, bytes] = process.argv.slice(2);
const size = Number(bytes);
if (!path || !Number.isSafeInteger(size) || size <= 0) {
  process.stderr.write('usage: selfcheck-writer PATH BYTES\n');
  process.exit(2);
}
const fd = openSync(path, 'w');
const n = writeSync(fd, Buffer.alloc(size));
closeSync(fd);
process.exit(n === size ? 0 : 3);
