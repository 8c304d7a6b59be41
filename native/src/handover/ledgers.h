// The home ledgers' checkpoint area (ledgers.c): a memfd of a fixed size, mapped shared.
#ifndef HS_SESSION_LEDGERS_H
#define HS_SESSION_LEDGERS_H
#include <node_api.h>
#include "abi.h"

#define HOMESFS_LEDGER_AREA_BYTES ((size_t) HOMESFS_LEDGER_SLOTS * HOMESFS_LEDGER_SLOT_BYTES + HOMESFS_LEDGER_SLOT_BYTES)

void hs_ledgers_export (napi_env env, napi_value exports);
#endif
