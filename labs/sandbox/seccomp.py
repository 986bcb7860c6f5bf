"""Seccomp filters as classic BPF: the sandbox's own, and the two a rank of the harness adds.

    from labs.sandbox import seccomp                         # the host (labs.sandbox)
    import seccomp                                   # the harness, in the sandbox
    seccomp.install(seccomp.rank_program())          # a rank, before the learner's code

The sandbox's module (``labs.sandbox``): it hands bwrap `sandbox_program` for
the whole run, and puts this file on the program's path beside the harness
(``/opt/harness``, where nothing else of the project is), so the harness
filters its ranks with the same numbers and instructions: one table of
syscall numbers, not two. Standard library only; nothing here is secret.

Why a rank needs a filter of its own on top of the sandbox's: the guard's
audit hook sees ``subprocess.Popen`` and ``os.fork``, but not
``_posixsubprocess.fork_exec``, which starts a process that no hook watches
(a ``/bin/cat`` of the run's files, an interpreter without the guard). So each
rank, before the learner's file is imported, asks the kernel to refuse what
starts a process (``execve``, ``fork``, ``vfork``, ``clone`` unless it makes a
thread, ``clone3``) and what makes a link (a symlink swapped by a thread
under the guard's open check was a race the guard lost). Threads stay
possible: torch needs them, and a thread is ``clone`` with
``CLONE_THREAD`` (``clone3`` fails with ENOSYS, which makes glibc fall back to
``clone``). A filter cannot be removed, and is inherited by every thread.

A second filter (`sealed_program`), stacked right after the first, before
the rank runs anything of the learner's, leaves the rank no way to another
rank but its pipes to the harness, whose router forwards and counts every
message (``router.py``): see `SEALED_REFUSED`. Filters stack: a call runs
only if every filter allows it.
"""

from __future__ import annotations

import errno
import platform
import struct

# The audit architecture the kernel reports, per machine; a call from another one is killed.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# System call numbers per machine; a name missing on a machine is a call it does not have
# (aarch64 has only the *at forms of link, symlink, and no fork or vfork).
NUMBERS = {
    "x86_64": {"unshare": 272, "setns": 308, "ptrace": 101, "keyctl": 250, "add_key": 248,
               "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
               "mount": 165, "umount2": 166, "pivot_root": 155, "kexec_load": 246,
               "init_module": 175, "finit_module": 313, "delete_module": 176,
               "open_by_handle_at": 304, "acct": 163, "process_vm_readv": 310,
               "process_vm_writev": 311, "modify_ldt": 154,
               "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
               "link": 86, "symlink": 88, "linkat": 265, "symlinkat": 266,
               "socket": 41, "socketpair": 53, "seccomp": 317,
               "open": 2, "creat": 85, "openat": 257, "memfd_create": 319, "mknod": 133,
               "mknodat": 259, "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240,
               "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "kill": 62, "tkill": 200,
               "tgkill": 234, "mkdir": 83, "mkdirat": 258, "rename": 82, "renameat": 264,
               "renameat2": 316, "rmdir": 84, "unlink": 87, "unlinkat": 263, "chmod": 90,
               "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94,
               "fchownat": 260, "utime": 132, "utimes": 235, "utimensat": 280, "futimesat": 261,
               "truncate": 76, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
               "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "setpriority": 141,
               "ioprio_set": 251, "prlimit64": 302, "sched_setaffinity": 203,
               "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314,
               "flock": 73, "fcntl": 72},
    "aarch64": {"unshare": 97, "setns": 268, "ptrace": 117, "keyctl": 219, "add_key": 217,
                "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
                "mount": 40, "umount2": 39, "pivot_root": 41, "kexec_load": 104,
                "init_module": 105, "finit_module": 273, "delete_module": 106,
                "open_by_handle_at": 265, "acct": 89, "process_vm_readv": 270,
                "process_vm_writev": 271,
                "clone": 220, "execve": 221, "execveat": 281, "linkat": 37, "symlinkat": 36,
                "socket": 198, "socketpair": 199, "seccomp": 277,
                "openat": 56, "memfd_create": 279, "mknodat": 33, "shmget": 194, "msgget": 186,
                "semget": 190, "mq_open": 180, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                "kill": 129, "tkill": 130, "tgkill": 131, "mkdirat": 34, "renameat": 38,
                "renameat2": 276, "unlinkat": 35, "fchmod": 52, "fchmodat": 53, "fchown": 55,
                "fchownat": 54, "utimensat": 88, "truncate": 45, "setxattr": 5, "lsetxattr": 6,
                "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
                "setpriority": 140, "ioprio_set": 30, "prlimit64": 261, "sched_setaffinity": 122,
                "sched_setscheduler": 119, "sched_setparam": 118, "sched_setattr": 274,
                "flock": 32, "fcntl": 25},
}
# The same numbers on every machine (io_uring, the new mount API, pidfd_getfd, clone3).
COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
          "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
          "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pidfd_getfd": 438,
          "clone3": 435, "openat2": 437, "pidfd_open": 434, "pidfd_send_signal": 424,
          "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466}
CLONE_NEWUSER = 0x10000000
CLONE_THREAD = 0x00010000

# The four instructions our programs use, and the return values.
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
ALLOW, KILL = 0x7FFF0000, 0x80000000  # SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS
NR, ARCH, ARG0 = 0, 4, 16  # offsets in seccomp_data; ARG0: the low 32 bits (little-endian)
X32 = 0x40000000  # x32 calls carry this bit and would dodge the x86_64 numbers

# The sandbox's filter, on top of its namespaces, for every process of the run: no user
# namespace of its own (CLONE_NEWUSER would hand the program capabilities in it, the
# usual door to kernel bugs); no ptrace, nor its cousins that read or write another
# process's memory or take its fds (a rank must not reach the harness or a neighbour,
# which run as the same uid); and none of the calls a Python program never needs but
# kernel exploits like (keyrings, bpf, perf events, userfaultfd, io_uring, mounts,
# modules, the LDT).
SANDBOX_REFUSED = ("unshare", "setns", "ptrace", "keyctl", "add_key", "request_key", "bpf",
                   "perf_event_open", "userfaultfd", "mount", "umount2", "pivot_root", "kexec_load",
                   "init_module", "finit_module", "delete_module", "open_by_handle_at", "acct",
                   "process_vm_readv", "process_vm_writev", "modify_ldt",
                   # The same numbers on every arch (io_uring, the new mount API, pidfd_getfd).
                   "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree",
                   "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
                   "pidfd_getfd")
# The socket families a program may make: unix, IPv4, IPv6 (all inside the
# network namespace) and netlink (getifaddrs, which gloo calls). The others
# are refused: AF_VSOCK is not namespaced and reaches the hypervisor and the
# host's vsock listeners, and the rare ones (AF_ALG, TIPC, RDS...) are where
# kernel bugs are found, their modules loaded on first use.
SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK

# What a rank may not call from before it runs the learner's code (refused with EPERM).
RANK_REFUSED = ("execve", "execveat", "fork", "vfork", "link", "linkat", "symlink", "symlinkat")


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()) in AUDIT_ARCH


def numbers(machine: str | None = None) -> dict[str, int]:
    """Every call we know by name on ``machine`` (default: this one)."""
    return {**NUMBERS[machine or platform.machine()], **COMMON}


def fail(code: int) -> int:
    """SECCOMP_RET_ERRNO: the call returns -1 with ``errno`` = ``code``."""
    return 0x00050000 | code


def prologue(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """Kill a call made with another architecture's numbers, refuse x32's, load the number."""
    machine = machine or platform.machine()
    arch = AUDIT_ARCH[machine]
    prog = [(LD, 0, 0, ARCH), (JEQ, 1, 0, arch), (RET, 0, 0, KILL), (LD, 0, 0, NR)]
    if machine == "x86_64":
        prog += [(JSET, 0, 1, X32), (RET, 0, 0, fail(errno.ENOSYS))]
    return prog


def refuse(nrs, code: int = errno.EPERM) -> list[tuple[int, int, int, int]]:
    """Each of ``nrs`` (the number is loaded) fails with ``code``; others fall through."""
    prog = []
    for nr in sorted(set(nrs)):
        prog += [(JEQ, 0, 1, nr), (RET, 0, 0, fail(code))]
    return prog


def assemble(prog) -> bytes:
    """The program as the kernel (and ``bwrap --seccomp``) reads it: struct sock_filter[]."""
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)


def sandbox_program(machine: str | None = None) -> bytes:
    """The sandbox's filter (``bwrap --seccomp``): a wrong arch is killed, a call of
    `SANDBOX_REFUSED` fails with EPERM, clone3 with ENOSYS (its flags sit in memory a
    filter cannot read; glibc then falls back to clone), clone with CLONE_NEWUSER with
    EPERM, and a socket of a family not in `SOCKET_FAMILIES` with EAFNOSUPPORT."""
    machine = machine or platform.machine()
    nrs = numbers(machine)
    prog = prologue(machine) + refuse(nrs[name] for name in SANDBOX_REFUSED if name in nrs)
    n = len(SOCKET_FAMILIES)  # socket or socketpair: allow the listed families, refuse the rest
    prog += [(JEQ, 1, 0, nrs["socket"]), (JEQ, 0, n + 3, nrs["socketpair"]), (LD, 0, 0, ARG0)]
    prog += [(JEQ, n - i, 0, family) for i, family in enumerate(SOCKET_FAMILIES)]
    prog += [(RET, 0, 0, fail(errno.EAFNOSUPPORT)), (RET, 0, 0, ALLOW)]
    prog += [(JEQ, 0, 1, nrs["clone3"]), (RET, 0, 0, fail(errno.ENOSYS)),
             (JEQ, 1, 0, nrs["clone"]), (RET, 0, 0, ALLOW),
             (LD, 0, 0, ARG0),
             (JSET, 0, 1, CLONE_NEWUSER), (RET, 0, 0, fail(errno.EPERM)), (RET, 0, 0, ALLOW)]
    return assemble(prog)


def rank_program(machine: str | None = None) -> bytes:
    """A rank's filter: no new process, no program, no link; threads are fine."""
    machine = machine or platform.machine()
    nrs = numbers(machine)
    prog = prologue(machine) + refuse(nrs[name] for name in RANK_REFUSED if name in nrs)
    prog += [(JEQ, 0, 1, nrs["clone3"]), (RET, 0, 0, fail(errno.ENOSYS)),
             (JEQ, 1, 0, nrs["clone"]), (RET, 0, 0, ALLOW),
             (LD, 0, 0, ARG0),  # clone's flags
             (JSET, 1, 0, CLONE_THREAD), (RET, 0, 0, fail(errno.EPERM)), (RET, 0, 0, ALLOW)]
    return assemble(prog)


# What a rank may not call once its group is up and its cases are prepared (the second
# filter, ``sealed_program``), so that the ranks have no way to each other but their pipes
# to the harness's router, which counts what it forwards (``router.py``): no socket at all
# (a rank needs none), nothing shared through the file system (no file opened for
# writing, no name made, renamed, removed, no mode, owner, time or attribute set: each
# could carry the data), no System V or POSIX IPC, no memfd, no node, no signal with data.
SEALED_REFUSED = (
    "socket", "socketpair", "creat", "memfd_create", "mknod", "mknodat", "shmget", "msgget", "semget",
    "mq_open", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    "mkdir", "mkdirat", "rename", "renameat", "renameat2", "rmdir", "unlink", "unlinkat",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "utimensat", "futimesat", "truncate", "setxattr", "lsetxattr", "fsetxattr",
    "setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
    "setpriority", "ioprio_set", "flock",
)
# open and openat: refused when the flags (which argument) ask to write, create or truncate.
SEALED_OPENS = {"open": 1, "openat": 2}
O_WRITING = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND
# fcntl: refused for the commands that take a lock (F_SETLK, F_SETLKW, F_OFD_SETLK,
# F_OFD_SETLKW): a lock on a file every rank can open for reading is a bit between them.
SEALED_COMMANDS = {"fcntl": (1, (6, 7, 37, 38))}
# Calls aimed at a process (the argument that names it): only the rank itself (or 0, "me",
# where the call reads it so). Another rank's limits, affinity or scheduling can be set and
# read back, and a signal is a bit: each would be a channel between ranks.
SEALED_OWN = {"kill": (0, False), "tkill": (0, False), "tgkill": (0, False), "prlimit64": (0, True),
              "sched_setaffinity": (0, True), "sched_setscheduler": (0, True),
              "sched_setparam": (0, True), "sched_setattr": (0, True)}


def arg(k: int) -> int:
    """Offset of the low 32 bits of argument ``k`` in seccomp_data (little-endian machines)."""
    return ARG0 + 8 * k


def sealed_program(pid: int, machine: str | None = None) -> bytes:
    """A rank's second filter, stacked on `rank_program` before the learner's file is
    imported: see `SEALED_REFUSED`, `SEALED_OPENS`, `SEALED_COMMANDS`, `SEALED_OWN`. ``openat2`` fails with
    ENOSYS (its flags are behind a pointer; glibc falls back to ``openat``). Reading files
    stays possible, and so do threads, the pipes to the harness, and
    ``raise`` (``tgkill`` of this process)."""
    machine = machine or platform.machine()
    nrs = numbers(machine)
    prog = prologue(machine) + refuse(nrs[name] for name in SEALED_REFUSED if name in nrs)
    prog += [(JEQ, 0, 1, nrs["openat2"]), (RET, 0, 0, fail(errno.ENOSYS))]
    for name, k in SEALED_OPENS.items():
        if name in nrs:
            prog += [(JEQ, 0, 4, nrs[name]), (LD, 0, 0, arg(k)), (JSET, 0, 1, O_WRITING),
                     (RET, 0, 0, fail(errno.EPERM)), (RET, 0, 0, ALLOW)]
    for name, (k, refused) in SEALED_COMMANDS.items():
        m = len(refused)
        prog += [(JEQ, 0, m + 3, nrs[name]), (LD, 0, 0, arg(k))]
        prog += [(JEQ, m - i, 0, value) for i, value in enumerate(refused)]
        prog += [(RET, 0, 0, ALLOW), (RET, 0, 0, fail(errno.EPERM))]
    for name, (k, zero_is_self) in SEALED_OWN.items():
        if name not in nrs:
            continue
        ok = [pid & 0xFFFFFFFF] + ([0] if zero_is_self else [])
        prog += [(JEQ, 0, len(ok) + 3, nrs[name]), (LD, 0, 0, arg(k))]
        prog += [(JEQ, len(ok) - i, 0, value) for i, value in enumerate(ok)]
        prog += [(RET, 0, 0, fail(errno.EPERM)), (RET, 0, 0, ALLOW)]
    return assemble(prog + [(RET, 0, 0, ALLOW)])


def install(program: bytes) -> None:
    """Apply ``program`` to this process, all its threads and everything it starts; for good.

    Before the guard is armed only: it uses ctypes, which the guard refuses.
    Sets no_new_privs first (the kernel's condition for an unprivileged filter;
    the sandbox set it already, mode none did not). Raises OSError when the
    kernel refuses: a rank that cannot be confined must not run learner code.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(code))
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog): every thread at once.
    nr = numbers()["seccomp"]
    if libc.syscall(ctypes.c_long(nr), ctypes.c_long(1), ctypes.c_long(1), ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER) failed")


def undumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): no process of the same uid may read this one's
    ``/proc/PID/mem``, ``environ`` or ``fd`` (nor ptrace it). Inherited by fork,
    so the harness calls it before it forks the ranks."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
