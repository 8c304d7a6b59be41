/**
 * A python3 program that prints `{name: d_type}` of every entry of `dir` as
 * JSON, read with libc's readdir: Python's os.scandir hides whether d_type
 * came from the listing or from a stat of its own.
 */
export function readdirTypesScript(dir: string): string {
  return `
import ctypes, json
libc = ctypes.CDLL(None)
class Dirent(ctypes.Structure):
    _fields_ = [('d_ino', ctypes.c_uint64), ('d_off', ctypes.c_int64), ('d_reclen', ctypes.c_ushort), ('d_type', ctypes.c_ubyte), ('d_name', ctypes.c_char * 256)]
libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = [ctypes.c_void_p]
libc.closedir.argtypes = [ctypes.c_void_p]
d = libc.opendir(${JSON.stringify(dir)}.encode())
out = {}
while True:
    e = libc.readdir(d)
    if not e: break
    out[e.contents.d_name.decode()] = e.contents.d_type
libc.closedir(d)
print(json.dumps(out, sort_keys=True))
`;
}
