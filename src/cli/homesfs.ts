#!/usr/bin/env node
// Every FUSE op waits on the JS thread while its backing I/O runs on libuv's
// threadpool; the default 4 threads would serialise concurrent writers. This
// must be set before anything touches the pool, hence a separate entry file.
process.env.UV_THREADPOOL_SIZE ??= '16';
await import('./serve.js');
