// homesfs data plane: READ and WRITE answered on the session's worker from
// descriptors that JavaScript publishes per file handle. JavaScript decides
// which handles qualify and every write's charge; this file only serves what
// it was given (see dataplane.c).
#ifndef HOMESFS_DATAPLANE_H
#define HOMESFS_DATAPLANE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <node_api.h>

// Called first by the read op. Returns 1 when the read was answered here
// (*res is the byte count), 0 when it must go to JavaScript as before: the
// handle is not published for reads, the range is beyond what JavaScript can
// address, or the backing read failed (JavaScript repeats it, answers and
// logs the errno).
int hs_dp_read(uint64_t fh, char *buf, size_t len, off_t offset, int *res);

// Called first by the write op. Returns 1 when the write was answered here
// (*res is the byte count or -errno, as JavaScript decided), 0 when it must
// go to JavaScript with its data as before.
// caller: the writer's uid, gid and pid (for JavaScript's decision and its log lines).
int hs_dp_write(const char *path, uint64_t fh, const char *buf, size_t len, off_t offset, const uint32_t caller[3], int *res);
// FTRUNCATE of a handle published for writes whose inode's size C owns
// (fastpath_write.c hs_fastpath_wl_resize_begin): 1 done (the file has
// `size`), 0 when JavaScript decides (nothing changed).
int hs_dp_truncate(uint64_t fh, int64_t size);

// Called first by the release op. Returns 1 when the RELEASE was answered
// here and queued for JavaScript (deferral on), 0 when it must go to
// JavaScript as before.
int hs_dp_release(uint64_t fh);
// Whether RELEASEs are answered here and deferred (fuse.nativeRelease): 1 or 0.
int hs_dp_release_deferred(void);

// publish(fh, fd, flags) from C, for a handle opened natively under policy
// generation gen (hs_fastpath_policy_gen, read with the home's flags):
// served only while the generation stays, or once JavaScript set its flags. 1 when published.
int hs_dp_publish_fd(uint64_t fh, int fd, uint32_t flags, uint64_t dev, uint64_t ino, int append, uint64_t gen);

// unpublish from C: on return no read or write uses the descriptor. -> whether it was published.
int hs_dp_unpublish_fd(uint64_t fh);

// What is published for handle fh under the policy now: 0 and its DP_*
// flags in *flags, and with fn, fn's result for its descriptor (called while
// the descriptor cannot be closed: an open's backing ID is made from it);
// -1 when nothing current is published (the flags then 0).
int hs_dp_published(uint64_t fh, uint32_t *flags, int (*fn)(int fd, void *ctx), void *ctx);

// Adds the data plane's functions to the module's exports.
void hs_dp_export(napi_env env, napi_value exports);

#endif
