#ifndef HOMESFS_CALLS_H
#define HOMESFS_CALLS_H
#include <node_api.h>
void homesfs_calls_export (napi_env env, napi_value exports);
#endif
