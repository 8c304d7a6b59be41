// What the binding's fuse-native.c (patched at the seam) calls of ours: the
// one header it includes, so each hunk of the patch is a call, not code.
#ifndef HOMESFS_SEAM_H
#define HOMESFS_SEAM_H
#include <node_api.h>
#include "calls.h"
#include "channel.h"
#include "dataplane.h"
#include "dirhandles.h"
#include "fastpath.h"
#include "lead.h"
#include "removals.h"
#include "utf8.h"
// Adds every function and constant of ours to the addon's exports.
void homesfs_export (napi_env env, napi_value exports);
#endif
