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
extern uint64_t hs_flush_requests;
extern int hs_noflush_on;
extern uint64_t hs_noflush_count;
extern int hs_lead_wanted;
extern int hs_lead_on;
extern uint64_t hs_lead_handoffs;
extern uint64_t hs_lead_revoked;
extern uint64_t hs_lead_read_handoffs;
#endif
