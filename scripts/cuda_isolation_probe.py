"""Which of the isolation steps of a host (autograder/trusted/zygote.py) keeps CUDA from starting?

Each case runs in a fresh fork of a parent that never touched CUDA: the fork makes its namespaces
(as the host's monitor does), forks again (the host: PID 1 of a new PID namespace where there is one),
and there runs a CUDA computation.  Run it on a GPU node as root and as the sandbox's user::

    python3 scripts/cuda_isolation_probe.py
    setpriv --reuid=65534 --regid=65534 --clear-groups python3 scripts/cuda_isolation_probe.py [CASE...]

On an NVIDIA H200 (driver 580.159.04, torch 2.11, 2026-11-26) every case with a new PID namespace failed
with cudaGetDeviceCount error 304 ("OS call failed or operation not supported on this OS") and every
other case worked: hosts get no PID namespace where a GPU is visible (zygote.gpu_visible).
Needs only torch (the machine's python3 will do).
"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET = 0x20000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
import torch, torch._dynamo  # noqa

def chk(r, what):
    if r != 0:
        e = ctypes.get_errno(); raise OSError(e, f"{what}: {os.strerror(e)}")

def cuda():
    x = torch.ones(4, device="cuda"); return float((x * 2).sum().item())

def unshare(flags, tmpfs=()):
    uid, gid = os.getuid(), os.getgid()
    chk(libc.prctl(4, 1, 0, 0, 0), "dumpable1")
    chk(libc.unshare(flags), "unshare")
    if flags & NEWUSER:
        open("/proc/self/setgroups", "w").write("deny")
        open("/proc/self/uid_map", "w").write(f"{uid} {uid} 1")
        open("/proc/self/gid_map", "w").write(f"{gid} {gid} 1")
    chk(libc.prctl(4, 0, 0, 0, 0), "dumpable0")
    if flags & NEWNS:
        chk(libc.mount(b"none", b"/", None, 16384 | (1 << 18), None), "rprivate")
        for p in tmpfs:
            chk(libc.mount(b"tmpfs", p.encode(), b"tmpfs", 2 | 4, b"size=1073741824,mode=1777"), "tmpfs " + p)

def dropcaps():
    for cap in range(64): libc.prctl(24, cap, 0, 0, 0)
    libc.prctl(47, 4, 0, 0, 0)
    class H(ctypes.Structure): _fields_ = [("v", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class D(ctypes.Structure): _fields_ = [("e", ctypes.c_uint32), ("p", ctypes.c_uint32), ("i", ctypes.c_uint32)]
    d = (D * 2)(); chk(libc.capset(ctypes.byref(H(0x20080522, 0)), d), "capset"); chk(libc.prctl(38, 1, 0, 0, 0), "nnp")

ALL = NEWUSER | NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS
TMP = ("/tmp", "/dev/shm", "/var/tmp")
CASES = {
    "plain": lambda: None,
    "nondumpable": lambda: chk(libc.prctl(4, 0, 0, 0, 0), "d0"),
    "is_available_in_parent_then_fork": "fork-after-init",
    "userns": lambda: unshare(NEWUSER),
    "userns+mntns+tmpfs": lambda: unshare(NEWUSER | NEWNS, TMP),
    "userns+pidns": lambda: unshare(NEWUSER | NEWPID),
    "userns+ipcns": lambda: unshare(NEWUSER | NEWIPC),
    "userns+netns": lambda: unshare(NEWUSER | NEWNET),
    "userns+utsns": lambda: unshare(NEWUSER | NEWUTS),
    "all": lambda: unshare(ALL, TMP),
    "all+dropcaps": lambda: (unshare(ALL, TMP), "caps"),
    "all-but-pid+dropcaps": lambda: (unshare(ALL & ~NEWPID, TMP), "caps"),
    "all-but-ipc+dropcaps": lambda: (unshare(ALL & ~NEWIPC, TMP), "caps"),
    "all-but-shm-tmpfs+dropcaps": lambda: (unshare(ALL, ("/tmp", "/var/tmp")), "caps"),
    "all+dropcaps+dumpable1": lambda: (unshare(ALL, TMP), "caps", "d1"),
    # the lead of the first run: the host's own PID namespace with a /proc of its own (fresh), or an
    # empty one (what zygote.py mounts where a host has a PID namespace)
    "userns+mntns+pidns+freshproc": lambda: (unshare(NEWUSER | NEWNS | NEWPID, TMP), "proc"),
    "all+freshproc+dropcaps": lambda: (unshare(ALL, TMP), "proc", "caps"),
    "all+emptyproc+dropcaps": lambda: (unshare(ALL, TMP), "emptyproc", "caps"),
}

def run(name, setup):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            if setup == "fork-after-init":
                torch.cuda.is_available()
                p2 = os.fork()
                if p2 == 0:
                    try: msg = f"ok {cuda()}"
                    except Exception as e: msg = f"FAIL {type(e).__name__}: {str(e)[:160]}"
                    os.write(w, msg.encode()); os._exit(0)
                os.waitpid(p2, 0); os._exit(0)
            out = setup()
            out = out if isinstance(out, tuple) else ()
            p2 = os.fork()   # the host: after the last fork (pid 1 of a new pid namespace)
            if p2 == 0:
                try:
                    if "proc" in out: chk(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount proc")
                    if "emptyproc" in out:
                        chk(libc.mount(b"tmpfs", b"/proc", b"tmpfs", 2 | 4, b"size=4096,mode=555"), "tmpfs /proc")
                    if "caps" in out: dropcaps()
                    if "d1" in out: chk(libc.prctl(4, 1, 0, 0, 0), "d1")
                    msg = f"ok {cuda()} pid={os.getpid()}"
                except Exception as e:
                    msg = f"FAIL {type(e).__name__}: {str(e)[:200]}"
                os.write(w, msg.encode()); os._exit(0)
            os.waitpid(p2, 0)
        except Exception as e:
            os.write(w, f"SETUP FAIL {e}".encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    print(f"{name:32s} uid={os.getuid()}: {os.read(r, 4000).decode() or '(nothing)'}", flush=True)

only = sys.argv[1:]
for name, setup in CASES.items():
    if not only or name in only:
        run(name, setup)
