// The claim on an inode's last name, one table for C and JS.
//
// Two names of one inode in different directories can be removed at the same
// time: the kernel serialises removals per parent directory, not per inode, so
// each remover's fstat after its unlinkat (or rename over the name) may see
// nlink 0, and the bytes would be given back twice; with names removed by C
// and by JS too. What is certain is that the remover whose removal took the
// last name sees 0 (its fstat comes after it). So every remover enters the
// inode here before its removal and leaves after its fstat, and of those that
// saw 0, the first to leave settles the inode. Every one that sees 0 is
// registered across the moment nlink reached 0 (it entered before its own
// removal and leaves after its fstat), so the entry and its claim outlive all
// of them; it goes when the last registrant leaves. Meanwhile each holds a
// descriptor of the inode, so its number cannot be reused under the entry,
// and a file with nlink 0 never gets a name again here.

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <node_api.h>
#include "sys/napi_args.h"
#include "fastpath/claims.h"

#define RM_BUCKETS 1024
typedef struct rm_inode {
  struct rm_inode *next;
  uint64_t dev;
  uint64_t ino;
  uint32_t refs;
  int claimed;
} rm_inode_t;
static pthread_mutex_t rm_lock = PTHREAD_MUTEX_INITIALIZER;
static rm_inode_t *rm_table[RM_BUCKETS];  // under rm_lock
static uint64_t rm_entries = 0;           // under rm_lock
static uint64_t rm_raced = 0;             // removers that saw nlink 0 after another settled the inode, atomic

static rm_inode_t ** rm_find (uint64_t dev, uint64_t ino) {
  uint64_t h = (ino * 0x9E3779B97F4A7C15ull) ^ dev;
  rm_inode_t **at = &rm_table[(h >> 32) % RM_BUCKETS];
  while (*at != NULL && ((*at)->dev != dev || (*at)->ino != ino)) at = &(*at)->next;
  return at;
}

int hs_claim_enter (uint64_t dev, uint64_t ino) {
  int res = 0;
  pthread_mutex_lock(&rm_lock);
  rm_inode_t **at = rm_find(dev, ino);
  if (*at == NULL) {
    rm_inode_t *e = calloc(1, sizeof(rm_inode_t));
    if (e == NULL) res = -ENOMEM;
    else { e->dev = dev; e->ino = ino; *at = e; rm_entries++; }
  }
  if (res == 0) (*at)->refs++;
  pthread_mutex_unlock(&rm_lock);
  return res;
}

int hs_claim_leave (uint64_t dev, uint64_t ino, int gone) {
  int settles = 0;
  pthread_mutex_lock(&rm_lock);
  rm_inode_t **at = rm_find(dev, ino);
  rm_inode_t *e = *at;
  if (e != NULL) {
    if (gone) {
      if (e->claimed) __atomic_add_fetch(&rm_raced, 1, __ATOMIC_RELAXED);
      else settles = e->claimed = 1;
    }
    if (--e->refs == 0) {
      *at = e->next;
      free(e);
      rm_entries--;
    }
  }
  pthread_mutex_unlock(&rm_lock);
  return settles;
}

void hs_claim_stats (uint64_t *in_flight, uint64_t *raced) {
  pthread_mutex_lock(&rm_lock);
  *in_flight = rm_entries;
  pthread_mutex_unlock(&rm_lock);
  *raced = __atomic_load_n(&rm_raced, __ATOMIC_RELAXED);
}
