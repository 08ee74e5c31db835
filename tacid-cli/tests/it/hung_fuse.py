#!/usr/bin/env python3
"""A FUSE filesystem that answers until the file argv[2] exists, then never answers again.

Mounted at argv[1] by itself (root), straight on /dev/fuse: a hostile user's filesystem
whose server stops answering (fusermount lets any user mount one). Prints "ready" once
mounted. Test material for the CLI's search for holders; not shipped.
"""
import ctypes, os, struct, sys, threading

mnt, hang_flag = sys.argv[1], sys.argv[2]
fd = os.open("/dev/fuse", os.O_RDWR)
libc = ctypes.CDLL(None, use_errno=True)
opts = f"fd={fd},rootmode=40755,user_id=0,group_id=0,allow_other".encode()
if libc.mount(b"hungfuse", mnt.encode(), b"fuse", 0, opts) != 0:
    sys.exit(f"mount: {os.strerror(ctypes.get_errno())}")


def reply(unique, error=0, body=b""):
    os.write(fd, struct.pack("<IiQ", 16 + len(body), error, unique) + body)


def attr():
    # fuse_attr_out: valid for 0 s, so every stat asks again.
    a = struct.pack("<QQQQQQIIIIIIIIII", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0o40755, 2, 0, 0, 0, 4096, 0)
    return struct.pack("<QII", 0, 0, 0) + a


print("ready", flush=True)
while True:
    try:
        req = os.read(fd, 1 << 20)
    except OSError:
        break
    length, opcode, unique, nodeid = struct.unpack_from("<IIQQ", req)
    if os.path.exists(hang_flag):
        continue
    if opcode == 26:  # INIT
        body = struct.pack("<IIIIHHIIHHI", 7, 31, 0, 0, 0, 0, 4096, 0, 0, 0, 0) + b"\0" * 28
        reply(unique, 0, body)
    elif opcode == 3:  # GETATTR
        reply(unique, 0, attr())
    elif opcode in (2, 36, 42):  # FORGET, INTERRUPT, BATCH_FORGET: no answer
        continue
    elif opcode == 27:  # OPENDIR
        reply(unique, 0, struct.pack("<QII", 1, 0, 0))
    elif opcode == 29:  # RELEASEDIR
        reply(unique)
    else:
        reply(unique, -38)
