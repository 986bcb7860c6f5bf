"""What the sandboxed program sees and how it starts: the command lines of ``labs.sandbox``.

    from labs.sandbox import layout as sandbox_layout
    program = sandbox_layout.program_folder(harness, work)       # its folder on the path
    prefix, options, env = sandbox_layout.bwrap_command(["-m", "harness"], work=work,
                                                        program=program, limits=limits, uid=uid,
                                                        memory_rlimit=False)

Mode bwrap (`bwrap_command`): of ``/usr`` only the system libraries
(`system_libraries`) and, as root, ``setpriv``; the interpreter's binary,
standard library and libpython at ``/opt/python`` (`python_layout`: never its
whole prefix, which may be ``/usr``), the site-packages at ``/opt/site``, the
program's folder at ``/opt/harness`` and its files at ``/opt/input``, all
read-only; a small ``/etc`` of our own, a fresh ``/proc``, a private tmpfs
``/tmp`` (its cwd and HOME), no terminals; a layout that would show the
project is refused (`refuse_exposure`). Mode none (`plain_command`): a plain
child with the same cleared environment and a private temporary cwd.

The program's folder (`program_folder`) is a copy of the caller's (the
exercise harness, by default) with the sandbox's own standard-library modules
beside it, `OWN_MODULES`: ``seccomp`` (a program may filter its own processes
further, with the numbers of the sandbox's filter) and ``processes`` (it may
start, reap and kill processes of its own). Nothing else of ``labs`` is
on its path.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from labs.sandbox.limits import Limits, MiB, SandboxUnavailable, rlimits

PACKAGE = Path(__file__).resolve().parent.parent  # labs/
ROOT = PACKAGE.parent  # the project
# Put beside the program (both are standard library only, and import nothing of ours): this
# package's filters and the run machinery's process toolkit, bound by path.
OWN_MODULES = (PACKAGE / "sandbox" / "seccomp.py", PACKAGE / "processes.py")


def _base_env(*, path: str, home: str, inputs: str, pythonpath: str) -> dict[str, str]:
    return {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo", "PYTHONDONTWRITEBYTECODE": "1", "SANDBOX_INPUT": inputs,
            "PYTHONPATH": pythonpath}


def plain_command(python_args, *, work: Path, program: Path, limits: Limits,
                  memory_rlimit: bool) -> tuple[list[str], dict[str, str]]:
    """Mode none: (command, environment) of a plain child in ``work/tmp``."""
    tmp = work / "tmp"
    tmp.mkdir(mode=0o700)
    env = _base_env(path=f"{Path(sys.executable).parent}:{os.defpath}", home=str(tmp),
                    inputs=str(work / "input"), pythonpath=str(program))
    cmd = [shutil.which("prlimit") or "prlimit",
           *rlimits(limits, nproc=False, memory=memory_rlimit), "--",
           sys.executable, "-s", "-B", *python_args]
    return cmd, env


def python_layout() -> tuple[list[tuple[Path, str]], Path | None]:
    """What the interpreter needs, as (host path, path in the sandbox) binds,
    and the site-packages when they are outside its standard library.

    Not the interpreter's whole prefix: where that is ``/usr`` (Debian's
    python3) or ``/usr/local`` (python.org's images) it holds every tool of
    the host and its configuration. A small prefix at ``/opt/python`` holds
    the binary, the standard library (with ``lib-dynload``) and libpython
    where it is shared; Python finds its prefix from ``lib/pythonX.Y/os.py``
    next to the binary, as at home."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()  # the base's, also in a venv
    binds = [(Path(sys.executable).resolve(), f"/opt/python/bin/{version}"),
             (stdlib, f"/opt/python/lib/{version}")]
    soname = sysconfig.get_config_var("INSTSONAME")
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and soname and libdir:
        libpython = Path(libdir) / soname
        if libpython.is_file():
            binds.append((libpython.resolve(), f"/opt/python/lib/{soname}"))
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    return binds, (None if site.is_relative_to(stdlib) else site)


def system_libraries() -> list[str]:
    """The folders of ``/usr`` the dynamic loader needs for Python, its
    extension modules, torch and setpriv (their ``ldd`` names nothing else
    there): the multiarch library folder (Debian, Ubuntu), ``/usr/lib64``
    (the loader itself on Debian; every library on Fedora), and the C.UTF-8
    locale; a host with neither library folder gets ``/usr/lib``. Nothing
    else of ``/usr``: no binaries, ``/usr/local``, ``/usr/etc``, ``share``."""
    found = [f"/usr/lib/{arch}" for arch in [sysconfig.get_config_var("MULTIARCH")]
             if arch and Path(f"/usr/lib/{arch}").is_dir()]
    if Path("/usr/lib64").is_dir() and not Path("/usr/lib64").is_symlink():
        found.append("/usr/lib64")
    if not found:
        found.append("/usr/lib")
    if Path("/usr/lib/locale/C.utf8").is_dir():  # LANG=C.UTF-8
        found.append("/usr/lib/locale/C.utf8")
    return found


def program_folder(harness: Path, work: Path) -> Path:
    """The folder on the program's path: a copy of ``harness`` with `OWN_MODULES` beside
    it, which the run's uid can read whatever the checkout's modes (a umask of 077, a
    pytest temp dir), without bytecode caches."""
    copy = work / "harness"
    shutil.copytree(harness, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for module in OWN_MODULES:
        shutil.copyfile(module, copy / module.name)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return copy


def _etc(work: Path, uid: int) -> Path:
    """A small /etc: enough for gloo (hosts), getpass and pwd (passwd, group)."""
    etc = work / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(f"root:x:0:0::/:/usr/sbin/nologin\n"
                                f"learner:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n")
    (etc / "group").write_text(f"root:x:0:\nlearner:x:{uid}:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files\n")
    for f in etc.iterdir():
        f.chmod(0o444)
    etc.chmod(0o555)
    return etc


def refuse_exposure(bound: list[Path], site: Path | None) -> None:
    """Raise `SandboxUnavailable` where what we bind would show the project:
    the checkout (whose data/ holds the database and secrets by default)
    inside a bound folder, or our packages (the reference solutions)
    installed among the site-packages."""
    for folder in bound:
        if ROOT.resolve().is_relative_to(folder.resolve()):
            raise SandboxUnavailable(f"the project at {ROOT} is inside {folder}, which the "
                                     "sandbox shows to the program: move one of them")
    if site is not None and (site / "labs" / "exercises").exists():
        raise SandboxUnavailable(f"the site-packages at {site} hold a copy of labs.exercises "
                                 "(reference solutions): uninstall it")


def bwrap_command(python_args, *, work: Path, program: Path, limits: Limits, uid: int | None,
                  memory_rlimit: bool) -> tuple[list[str], list[str], dict[str, str]]:
    """Mode bwrap: (prefix: prlimit and bwrap, bwrap's options then ``--`` and the command,
    environment). ``uid``: the run's own (as root), or None for a user namespace."""
    python, site = python_layout()
    libraries = system_libraries()
    tops = [top for top in ("lib", "lib32", "lib64", "libx32") if (Path("/") / top).is_dir()]
    root = uid is not None
    setpriv = Path(shutil.which("setpriv") or "/usr/bin/setpriv").resolve() if root else None
    refuse_exposure([*(host for host, _ in python), *([site] if site else []),
                      *map(Path, libraries), *([setpriv] if setpriv else []),
                      *(Path("/") / top for top in tops if not (Path("/") / top).is_symlink())],
                     site if site is not None else Path(sysconfig.get_paths()["purelib"]))
    etc = _etc(work, uid if root else os.getuid())
    prefix = [shutil.which("prlimit") or "prlimit",
              *rlimits(limits, nproc=root, memory=memory_rlimit), "--",
              shutil.which("bwrap") or "bwrap"]
    cmd = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if root:
        # setpriv needs these three to drop to the run's uid; it then clears them all.
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                "--cap-add", "CAP_SETPCAP"]
    else:
        cmd += ["--unshare-user"]
    # Of /usr only the libraries (review N-11: all of it showed the host's
    # tools and their configuration), and setpriv where it drops the uid.
    for folder in libraries:
        cmd += _ro_bind(folder, folder)
    if setpriv is not None:
        cmd += _ro_bind(str(setpriv), "/usr/bin/setpriv")
    for top in tops:  # the loader's own path (/lib64/ld-linux-x86-64.so.2) and unmerged hosts
        host = Path("/") / top
        if host.is_symlink():
            cmd += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            cmd += ["--ro-bind", str(host), f"/{top}"]
    tmpfs = ["--perms", "1777", "--size", str(limits.tmpfs_mb * MiB), "--tmpfs"]
    # bwrap's /dev has a devpts of its own, but every devpts draws on one
    # host-wide pool (kernel.pty.max); a program needs no terminal: hide it.
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "0555", "--tmpfs", "/dev/pts",
            *tmpfs, "/dev/shm", *tmpfs, "/tmp",
            "--perms", "0755", "--dir", "/etc"]
    for f in sorted(etc.iterdir()):
        cmd += ["--ro-bind", str(f), f"/etc/{f.name}"]
    if Path("/etc/ld.so.cache").is_file():
        cmd += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for host, inside in python:
        cmd += _ro_bind(str(host), inside)
    pythonpath = "/opt/harness"
    if site is not None:
        cmd += ["--ro-bind", str(site), "/opt/site"]
        pythonpath += ":/opt/site"
    cmd += ["--ro-bind", str(program), "/opt/harness",
            "--ro-bind", str(work / "input"), "/opt/input", "--chdir", "/tmp", "--"]
    if root:
        cmd += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    cmd += [python[0][1], "-s", "-B", *python_args]
    env = _base_env(path="/opt/python/bin", home="/tmp", inputs="/opt/input",
                    pythonpath=pythonpath)
    # A shared libpython (pyenv, python.org) is found through an absolute RUNPATH at home.
    env["LD_LIBRARY_PATH"] = "/opt/python/lib"
    return prefix, cmd, env


def _ro_bind(host: str, inside: str) -> list[str]:
    """bwrap options binding ``host`` read-only at ``inside``, its parents made
    first with mode 0755 (bwrap would make them 0700, closed to the run's uid)."""
    parents = [str(p) for p in reversed(Path(inside).parents) if str(p) != "/"]
    return [*(a for p in parents for a in ("--perms", "0755", "--dir", p)),
            "--ro-bind", host, inside]
