// What the node-table tests share: the root, a name found as an inode, a
// node's path, the table's size. Static functions: each test file includes
// this once.
#ifndef HOMESFS_TEST_NODES_HELPERS_H
#define HOMESFS_TEST_NODES_HELPERS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "../src/session/nodes.h"

static hs_node_t *root (void) { return hs_node_get(HS_ROOT_ID); }

// (parent, name) looked up as inode ino of type, with nlink names: the node's ID.
static uint64_t found_n (hs_node_t *parent, const char *name, uint64_t ino, uint32_t type, uint32_t nlink) {
  uint64_t id = 0;
  CHECK_EQ(hs_node_found(parent, name, ino, type, nlink, &id), 0);
  return id;
}

static char *path_of (uint64_t id) {
  hs_node_t *n = hs_node_get(id);
  if (n == NULL) return NULL;
  char *p = hs_path_peek(n);
  hs_node_put(n);
  return p;
}

#define CHECK_PATH(id, want) do { char *p_ = path_of(id); CHECK(p_ != NULL && strcmp(p_, want) == 0); if (p_ && strcmp(p_, want)) fprintf(stderr, "  path %s\n", p_); free(p_); } while (0)

static uint64_t count (void) {
  uint64_t nodes = 0, known = 0;
  hs_nodes_stats(&nodes, &known);
  return nodes;
}
#endif
