import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { SELFCHECK_NAME } from '../fs/attr.js';
import { S_IFREG, SYNTHETIC_INO, type Attr } from '../fs/present.js';
import { SELFCHECK_FH } from '../fs/state.js';

const WRITER = fileURLToPath(new URL('../cli/selfcheck-writer.js', import.meta.url));

// Twice the largest request: the file is direct I/O, so the kernel splits a
// write at the pages of the writer's buffer, which Node does not align; the
// middle request of 2 MiB is whole whatever the buffer's offset.
const TOTAL = 2 * 1024 * 1024;

export interface SelfCheckReport {
  state: 'pending' | 'ok' | 'failed';
  maxWriteRequest: number | null;
  requests: number;
  detail?: string;
}

/**
 * Proves at start-up that large writes reach the daemon as requests of the
 * size INIT negotiated (session/proto.c: up to 1 MiB): a child process writes
 * 2 MiB in one write(2) to a hidden root-only file at the mount root that
 * keeps nothing, and the largest request the daemon saw is compared with the
 * negotiated max_write. The
 * writer checks that the file it opened is that synthetic file on the live
 * homesfs mount at the mount point before it writes a byte
 * (cli/selfcheck-writer.ts): a detached or dead mount fails the check, never
 * a file on the disk under the mount point.
 */
export class SelfCheck {
  private sizes: number[] = [];
  readonly report: SelfCheckReport = { state: 'pending', maxWriteRequest: null, requests: 0 };

  owns(path: string | null): boolean {
    return path === `/${SELFCHECK_NAME}`;
  }

  ownsHandle(fh: number): boolean {
    return fh === SELFCHECK_FH;
  }

  attr(): Attr {
    const now = BigInt(Date.now()) * 1_000_000n;
    return {
      mode: S_IFREG | 0o200,
      uid: 0,
      gid: 0,
      size: 0n,
      nlink: 1,
      ino: SYNTHETIC_INO.selfCheck,
      dev: 0n,
      rdev: 0n,
      blksize: 4096,
      blocks: 0n,
      atimeNs: now,
      mtimeNs: now,
      ctimeNs: now,
    };
  }

  open(): number {
    this.sizes = [];
    return SELFCHECK_FH;
  }

  write(len: number): number {
    this.sizes.push(len);
    return len;
  }

  release(): number {
    return 0;
  }

  /** `expected`: the largest WRITE INIT negotiated */
  run(mountPoint: string, timeoutMs: number, expected: number): Promise<SelfCheckReport> {
    const want = Math.min(expected, TOTAL / 2);
    return new Promise((resolve) => {
      execFile(process.execPath, [WRITER, `${mountPoint}/${SELFCHECK_NAME}`, String(TOTAL), String(SYNTHETIC_INO.selfCheck)], { timeout: timeoutMs }, (err, _out, stderr) => {
        const max = this.sizes.length ? Math.max(...this.sizes) : null;
        this.report.maxWriteRequest = max;
        this.report.requests = this.sizes.length;
        if (err) {
          this.report.state = 'failed';
          // Exit 4: the mount point is not this daemon's live mount (the writer wrote nothing).
          this.report.detail = `self-check writer failed: ${String(stderr).trim() || err.message}`;
        } else if (max !== want) {
          this.report.state = 'failed';
          this.report.detail = `2 MiB arrived in ${this.sizes.length} requests of at most ${String(max)} bytes (expected ${want})`;
        } else {
          this.report.state = 'ok';
          this.report.detail = `2 MiB arrived in ${this.sizes.length} requests of at most ${max} bytes`;
        }
        resolve(this.report);
      });
    });
  }
}
