// The names a file unlinked while open is hidden under (abi.h:
// HIDDEN_PREFIX, then HIDDEN_DIGITS lowercase hex digits), as the
// session makes them (session/nodes.c) and src/paths/hidden-names.ts knows
// them. Pure; any thread.
#ifndef HOMESFS_HIDDEN_NAME_H
#define HOMESFS_HIDDEN_NAME_H
#include <stddef.h>
#include <string.h>

#include "abi.h"

static inline int hs_is_hidden_name (const char *name, size_t len) {
  size_t plen = sizeof(HOMESFS_HIDDEN_PREFIX) - 1;
  if (len != plen + HOMESFS_HIDDEN_DIGITS || memcmp(name, HOMESFS_HIDDEN_PREFIX, plen) != 0) return 0;
  for (size_t i = plen; i < len; i++) {
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return 0;
  }
  return 1;
}
#endif
