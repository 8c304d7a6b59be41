# homesfs' native addon, built from this folder by scripts/build-native.mjs.
#
# fuse.node is one translation unit per file: the binding's own fuse-native.c,
# compiled from the installed @cocalc/fuse-native (patched only at the seam,
# patches/), plus our C in src/. scandir.node is ours alone and has no global
# state, so the scan's worker threads can load it.
#
# The binding's directory is found the way Node finds it from here, so a
# global install (homesfs/node_modules/@cocalc/fuse-native) builds too.
{
  "variables": {
    "fuse_native_dir%": "<!(node -p \"require('path').relative('.', require('path').dirname(require.resolve('@cocalc/fuse-native/package.json')))\")",
    "fuse_include_dirs%": "<!(pkg-config fuse --cflags-only-I | sed s/-I//g)",
    "fuse_libraries%": "<!(pkg-config --libs-only-L --libs-only-l fuse)",
    # HOMESFS_SANITIZE=1 node scripts/build-native.mjs: AddressSanitizer and
    # UndefinedBehaviorSanitizer, built apart (native/build-sanitize) and never installed.
    "homesfs_sanitize%": "<!(node -p \"process.env.HOMESFS_SANITIZE === '1' ? 1 : 0\")",
    "napi_macros_dir%": "<!(node -p \"require('path').dirname(require.resolve('napi-macros/package.json', { paths: [require('path').dirname(require.resolve('@cocalc/fuse-native/package.json'))] }))\")",
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
    "target_name": "fuse",
    "include_dirs": [ "src", "<(napi_macros_dir)", "<@(fuse_include_dirs)" ],
    "link_settings": { "libraries": [ "<@(fuse_libraries)" ] },
    "sources": [
      "<(fuse_native_dir)/fuse-native.c",
      "src/calls.c",
      "src/channel.c",
      "src/dataplane.c",
      "src/dataplane_write.c",
      "src/dirhandles.c",
      "src/fastpath_attr.c",
      "src/fastpath_create.c",
      "src/fastpath_napi.c",
      "src/fastpath_open.c",
      "src/fastpath_refs.c",
      "src/fastpath_setattr.c",
      "src/fastpath_state.c",
      "src/fastpath_unlink.c",
      "src/fastpath_write.c",
      "src/removals.c",
      "src/seam.c",
      "src/utf8.c",
    ],
  }, {
    "target_name": "scandir",
    "sources": [ "src/scandir.c" ],
  }]
}
