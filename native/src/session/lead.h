// One reader of /dev/fuse at a time (channel.c).
#ifndef HOMESFS_LEAD_H
#define HOMESFS_LEAD_H
// Gives up reading the device before this thread blocks on anything slow
// (JavaScript's answer, data I/O): another thread takes over. No-op on a
// thread that does not lead.
void hs_lead_release(void);
// The same before a read that would wait for the disk, counted apart.
void hs_lead_release_read(void);
// A write above this many bytes gives the lead up first: the copy is long
// beside a wake, and it may be throttled (dirty pages). Below it, a
// page-cache copy is shorter than the wake of another reader; the watchdog
// covers the one that blocks. Reads keep the lead while the page cache
// serves them (RWF_NOWAIT), and give it up before they wait for the disk.
#define HOMESFS_LEAD_BIG_IO (32 * 1024)
#endif
