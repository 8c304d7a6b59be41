// Child process of the daemon: performs one rename(2) on the mount so the
// kernel and libfuse see it (see HomeLifecycle.renameThroughMount in src/homes/lifecycle.ts). It runs
// outside the daemon's event loop, so a synchronous call is the simple choice.
import { renameSync } from 'node:fs';

const [from, to] = process.argv.slice(2);
if (!from || !to) {
  process.stderr.write('usage: rename-helper FROM TO\n');
  process.exit(2);
}
try {
  renameSync(from, to);
} catch (err) {
  process.stderr.write(`${(err as NodeJS.ErrnoException).code ?? 'EIO'}\n`);
  process.exit(1);
}
