// One-shot readiness watches of descriptors on the JavaScript thread's event
// loop (fdwatch.c): what Node offers for its own sockets, for descriptors
// Node cannot wrap (a SOCK_SEQPACKET listener, a pidfd). JavaScript thread only.
#ifndef HOMESFS_FDWATCH_H
#define HOMESFS_FDWATCH_H
#include <node_api.h>
void hs_fdwatch_export (napi_env env, napi_value exports);
#endif
