// The one reading of CLOCK_MONOTONIC in ns the addon's threads time things by
// (the single reader's watchdog, a worker's request age, how long JS's check
// of a home stands). Any thread.
#ifndef HOMESFS_CLOCK_H
#define HOMESFS_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline int64_t hs_mono_ns (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
#endif
