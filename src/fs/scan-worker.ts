/**
 * The start-up scan's walker, on a worker thread: synchronous lstat/readdir
 * there cost ~2 µs a call, against ~30 µs for a threadpool round trip from the
 * JS thread (200k files: 6.5 s → well under 1 s), and the JS thread keeps
 * serving meanwhile. Descriptors are the process's: the home's O_PATH
 * descriptor, held open by the caller for the whole walk, is the root.
 * With scandir.node (src/fs/scandir.ts) the walk lists and lstat's a whole
 * directory per native call; without it, the JS walk.
 */
import fs from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { repairTreeSync } from '../backing/repair.js';
import { walkTreeNative } from './scan-native.js';
import { walkTree, type ScanJob, type ScanReply } from './scan-walk.js';
import { loadLister } from './scandir.js';

const port = parentPort;
if (!port) throw new Error('scan-worker.js runs only as a worker thread');
const lister = loadLister();

port.on('message', (job: ScanJob) => {
  let reply: ScanReply;
  try {
    const onProgress = (p: { bytes: number; inodes: number }) => port.postMessage({ id: job.id, progress: p } satisfies ScanReply);
    const exclude = new Set(job.exclude);
    if (job.repair) reply = { id: job.id, repaired: repairTreeSync(fs, job.rootFd, job.repair) };
    else reply = { id: job.id, result: lister ? walkTreeNative(fs, lister, job.rootFd, exclude, onProgress) : walkTree(fs, job.rootFd, exclude, onProgress) };
  } catch (err) {
    reply = { id: job.id, error: (err as Error).message };
  }
  port.postMessage(reply);
});
