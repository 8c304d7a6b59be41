// The data plane's calls into other files that its READ path and handle table
// never make (the write path's, fastpath_write.c's write decision): a call aborts,
// so a test cannot pass through them. Its N-API and libuv calls are stubbed
// the same way by the Makefile (generated).
#include <stdio.h>
#include <stdlib.h>

#define STUB(name) \
  void name(void); \
  void name(void) { fprintf(stderr, "stub %s called in a unit test\n", #name); abort(); }

STUB(hs_fastpath_wl_begin)
STUB(hs_fastpath_wl_end)
STUB(hs_fastpath_wl_resize_begin)
STUB(hs_fastpath_wl_resize_end)
