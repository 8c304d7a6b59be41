// native/src/sys/: no FUSE and no shared state: calls.c (the system calls
// Node lacks, run on libuv's threadpool and answered on the JS main thread),
// utf8.c (the strict UTF-8 check, pure, any thread) and scandir.c (the
// start-up scan's lister, scandir.node, loaded by the scan's worker threads).
// No locks.
#ifndef HOMESFS_CALLS_H
#define HOMESFS_CALLS_H
#include <node_api.h>
void hs_calls_export (napi_env env, napi_value exports);
#endif
