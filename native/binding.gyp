# homesfs' native addons, built from this folder by scripts/build-native.mjs.
#
# homesfs.node: the FUSE session (src/session/) on libfuse 2.9's low-level
# API, the fast path and data plane it answers from, and the calls Node lacks;
# linked against the system libfuse.so.2 (pkg-config fuse). scandir.node: the
# start-up scan's lister, apart because it has no global state and the scan's
# worker threads load it.
{
  "variables": {
    "fuse_include_dirs%": "<!(pkg-config fuse --cflags-only-I | sed s/-I//g)",
    "fuse_libraries%": "<!(pkg-config --libs-only-L --libs-only-l fuse)",
    # HOMESFS_SANITIZE=1 node scripts/build-native.mjs: AddressSanitizer and
    # UndefinedBehaviorSanitizer, built apart (native/build-sanitize) and never installed.
    "homesfs_sanitize%": "<!(node -p \"process.env.HOMESFS_SANITIZE === '1' ? 1 : 0\")",
    "napi_macros_dir%": "<!(node -p \"require('path').dirname(require.resolve('napi-macros/package.json'))\")",
  },
  "target_defaults": {
    "cflags!": [ "-O3" ],
    "cflags": [ "-g", "-O2", "-Wall" ],
    # libfuse 2.9's API, for every file that includes its headers
    "defines": [ "FUSE_USE_VERSION=29" ],
    "conditions": [
      [ "homesfs_sanitize==1", {
        "cflags": [ "-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer" ],
        "ldflags": [ "-fsanitize=address,undefined" ],
      } ],
    ],
  },
  "targets": [{
    "target_name": "homesfs",
    "include_dirs": [ "src", "<(napi_macros_dir)", "<@(fuse_include_dirs)" ],
    "link_settings": { "libraries": [ "<@(fuse_libraries)" ] },
    "sources": [
      "src/addon.c",
      "src/fastpath/claims.c",
      "src/fastpath/claims_napi.c",
      "src/fastpath/dataplane.c",
      "src/fastpath/dataplane_napi.c",
      "src/fastpath/dataplane_write.c",
      "src/fastpath/dirhandles.c",
      "src/fastpath/dirhandles_napi.c",
      "src/fastpath/fastpath_attr.c",
      "src/fastpath/fastpath_dircache.c",
      "src/fastpath/fastpath_create.c",
      "src/fastpath/fastpath_napi.c",
      "src/fastpath/fastpath_open.c",
      "src/fastpath/fastpath_refs.c",
      "src/fastpath/fastpath_setattr.c",
      "src/fastpath/fastpath_state.c",
      "src/fastpath/fastpath_unlink.c",
      "src/fastpath/fastpath_walk.c",
      "src/fastpath/fastpath_write.c",
      "src/handover/dirs_handover.c",
      "src/handover/handover.c",
      "src/handover/holder.c",
      "src/handover/journal_js.c",
      "src/handover/ledgers.c",
      "src/handover/nodes_handover.c",
      "src/handover/nodes_journal.c",
      "src/handover/nodes_journal_replay.c",
      "src/handover/sdstore.c",
      "src/handover/session_adopt.c",
      "src/session/bridge.c",
      "src/session/bridge_napi.c",
      "src/session/channel.c",
      "src/session/channel_napi.c",
      "src/session/handles.c",
      "src/session/inval.c",
      "src/session/inval_napi.c",
      "src/session/loop.c",
      "src/session/proto.c",
      "src/session/passthrough.c",
      "src/session/marshal.c",
      "src/session/nodes.c",
      "src/session/nodes_paths.c",
      "src/session/nodes_requests.c",
      "src/session/nodes_resolve.c",
      "src/session/ops_attr.c",
      "src/session/ops_attr_napi.c",
      "src/session/ops_common.c",
      "src/session/ops_common_napi.c",
      "src/session/ops_dirs.c",
      "src/session/ops_dirs_plus.c",
      "src/session/ops_dirs_napi.c",
      "src/session/ops_files.c",
      "src/session/ops_files_napi.c",
      "src/session/ops_names.c",
      "src/session/ops_names_napi.c",
      "src/session/session.c",
      "src/session/session_napi.c",
      "src/sys/calls.c",
      "src/sys/fdwatch.c",
      "src/sys/napi_args.c",
      "src/sys/utf8.c",
    ],
  }, {
    "target_name": "scandir",
    "include_dirs": [ "src", "<(napi_macros_dir)" ],
    "sources": [ "src/sys/scandir.c", "src/sys/napi_args.c" ],
  }]
}
