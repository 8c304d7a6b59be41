#ifndef HOMESFS_CHANNEL_INTERNAL_H
#define HOMESFS_CHANNEL_INTERNAL_H
// The channel's switches and counters, shared by channel.c (the session's
// workers read them) and channel_napi.c (JS sets and reads them on its main
// thread). Each is an atomic: no lock; ch_flush_gate_ref is the JS thread's.
#include <stdint.h>
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
#endif

extern uint16_t *ch_flush_gate;
#ifndef HOMESFS_NO_NAPI
extern napi_ref ch_flush_gate_ref;
#endif
extern uint64_t homesfs_flush_requests;
extern int homesfs_noflush_on;
extern uint64_t homesfs_noflush_count;
extern int homesfs_lead_wanted;
extern int homesfs_lead_on;
extern uint64_t homesfs_lead_handoffs;
extern uint64_t homesfs_lead_revoked;
extern uint64_t homesfs_lead_read_handoffs;
#endif
