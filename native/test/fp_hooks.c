// The fast path's test hooks (fastpath_internal.h, HOMESFS_TEST_HOOKS): off
// until a test sets them. fp_test_fail_allocs > 0: that many of the fast
// path's next allocations fail.
#include <stdint.h>
#include <stdlib.h>

int fp_test_openat2_errno = 0;
void (*fp_test_unlink_checked) (uint64_t dev, uint64_t ino) = NULL;
void (*fp_test_settle_asked) (void) = NULL;
void (*fp_test_dir_walked) (void) = NULL;
void (*fp_test_symlink_made) (int pfd, const char *name) = NULL;
void (*fp_test_release_closing) (uint64_t dev, uint64_t ino) = NULL;
int fp_test_fail_allocs = 0;

static int fp_test_fails (void) {
  int n = __atomic_load_n(&fp_test_fail_allocs, __ATOMIC_ACQUIRE);
  while (n > 0) {
    if (__atomic_compare_exchange_n(&fp_test_fail_allocs, &n, n - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
  }
  return 0;
}

void * fp_test_calloc (size_t n, size_t size);
void * fp_test_calloc (size_t n, size_t size) { return fp_test_fails() ? NULL : calloc(n, size); }
void * fp_test_malloc (size_t size);
void * fp_test_malloc (size_t size) { return fp_test_fails() ? NULL : malloc(size); }
