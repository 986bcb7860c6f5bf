"""The guard: what the learner's code may call, armed in each rank before it is imported.

The sandbox is the security boundary, and the grade rests on nothing in a
rank (docs/contributors/grading.md: a rank holds only its own inputs and no
process group; the router in the harness counts and checks). The guard is
about a clear message when the learner reaches for what the exercise does
not allow, and one more layer around the harness. Two layers:

1. Names. Every collective reachable from Python (``torch.distributed.X``,
   ``distributed_c10d.X``, any other module that holds the same function,
   the collective methods of ``ProcessGroup``/``Backend``/``ProcessGroupGloo``,
   ``dist.group.WORLD``, the ``torch.ops.c10d`` namespaces) is replaced by a
   function that raises `ForbiddenCall` naming the call; the calls the plan
   allows point at the rank's `api.Api`, whose every call is a frame to the
   router. A route we missed finds no process group to run on: none exists
   in a rank, and its seccomp filter refuses the sockets one would need.
2. An audit hook (``sys.addaudithook``: it cannot be removed, and there is
   no way to switch it off once armed) refuses ctypes, importing
   ctypes/cffi, frames (``sys._getframe``, ``tb_frame``) while the learner's
   code is on the stack, the ``gc`` walkers (but for a driver's own walk
   through `walk`, with no frame of the learner's on the stack), setting the special attributes
   (``__class__``, ``__bases__``...) of types the learner did not define,
   starting processes, and opening files outside the private tmp folder and
   the interpreter's own files. Some routes raise no audit event
   (``_posixsubprocess.fork_exec``, files opened by torch's C++): behind
   this hook, the kernel refuses each rank new processes, links, sockets
   and files opened to write (its seccomp filters, ``seccomp.py``), and the
   harness process is non-dumpable. What such a route could find in a rank
   is the rank's own inputs and the public fields of its case: the ranks
   are forked before the harness reads the plan.
"""

from __future__ import annotations

import os
import sys
import types


class ForbiddenCall(RuntimeError):
    """The learner called a collective (or another call) this exercise does not allow."""

    def __init__(self, call: str, kind: str = "collective"):
        super().__init__(f"{call} is not available in this exercise")
        self.call = call
        self.kind = kind  # "collective" (and ctypes: a way to one) or "guard" (a way to the harness's data)


# torch.distributed functions that do communication other than the counted
# point-to-point calls. A plan's "allowed" list takes names out of this list.
COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "broadcast_object_list",
    "all_gather", "all_gather_into_tensor", "all_gather_coalesced", "all_gather_object",
    "all_gather_single", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_single", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "gather", "gather_object", "scatter", "scatter_object_list", "barrier", "monitored_barrier",
    "batch_isend_irecv", "send_object_list", "recv_object_list", "new_group", "new_subgroups",
    "new_subgroups_by_enumeration", "split_group", "_broadcast_coalesced",
)
# Collective methods of the C++ group objects, and the dist name that allows each.
GROUP_METHODS = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "reduce": "reduce",
    "broadcast": "broadcast", "allgather": "all_gather", "allgather_coalesced": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "_allgather_base": "all_gather",
    "all_gather_single": "all_gather", "all_gather_single_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter", "reduce_scatter_single_coalesced": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all", "all_to_all_single": "all_to_all", "gather": "gather",
    "scatter": "scatter", "barrier": "barrier", "monitored_barrier": "barrier",
}
# Operator namespaces whose ops run collectives straight from C++.
OP_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional", "_dtensor")
# Modules that are only a door to what the guard refuses.
REFUSED_IMPORTS = ("ctypes", "_ctypes", "cffi", "_cffi_backend", "torch.distributed._functional_collectives")
PROCESS_EVENTS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                  "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn")
WALKERS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile")
# Ways to a frame, whose locals are the harness's (this group's cases): refused while a
# frame of the learner's file is on the stack; the harness reads its own tracebacks after.
FRAME_EVENTS = ("sys._getframe", "sys._current_frames", "sys._getframemodulename")
FRAME_ATTRIBUTES = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")


def _raiser(call: str):
    def forbidden(*_args, **_kwargs):
        raise ForbiddenCall(call)
    forbidden.__name__ = forbidden.__qualname__ = call.rpartition(".")[2] or call
    return forbidden


class _NoProcessGroup:
    """Stands in for ``dist.group.WORLD``: a rank has no process group (its calls go to the
    router), so any method of one is refused by name; passing it as ``group=`` is fine."""

    def __getattr__(self, name):
        raise ForbiddenCall(f"ProcessGroup.{name}")

    def __repr__(self) -> str:
        return "<the exercise's world group>"


class _ForbiddenNamespace(types.ModuleType):
    """Stands in for ``torch.ops.c10d`` and friends: any op looked up there is refused."""

    def __getattr__(self, name):
        raise ForbiddenCall(f"{self.__name__}.{name}")


# Per module loaded before the ranks forked: (its id, its number of names, the names under which
# it held a collective or a wrapped call then); see `index_holders`.
_HOLDERS: dict[str, tuple[int, int, tuple[str, ...]]] = {}


def index_holders() -> None:
    """In the harness, before the ranks fork (no learner code exists yet): for every module
    loaded, the names under which it holds one of ``torch.distributed``'s collectives or the
    calls the stand-in wraps. A rank's `arm` then looks only at those names in a module that
    has as many names as then, and at every name of any other module: with torch._dynamo
    loaded, the ~2,000 modules' every name cost each rank 0.04 s of CPU."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from api import WRAPPED
    candidates = {id(f) for module in (dist, c10d) for name in (*COLLECTIVES, *WRAPPED)
                  if (f := module.__dict__.get(name)) is not None}
    _HOLDERS.clear()
    for name, module in list(sys.modules.items()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        keys = tuple(key for key, value in list(namespace.items()) if id(value) in candidates)
        _HOLDERS[name] = (id(module), len(namespace), keys)


def _patch_names(api, allowed: set[str]) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    replace = {}  # id(original) -> replacement, for the sweep over all modules
    originals = []  # alive until the sweep is done: a freed original's id could be reused
    for name in COLLECTIVES:
        if name in allowed:
            continue
        for module, label in ((dist, "torch.distributed"), (c10d, "torch.distributed.distributed_c10d")):
            original = module.__dict__.get(name)
            if original is not None:
                fake = _raiser(f"{label}.{name}" if module is c10d else f"dist.{name}")
                replace[id(original)] = fake
                originals.append(original)
                setattr(module, name, fake)
    from api import WRAPPED
    for name in WRAPPED:
        if name in allowed:
            for module in (dist, c10d):
                original = module.__dict__.get(name)
                counted = getattr(api, name)
                if original is not None:
                    replace[id(original)] = counted
                    originals.append(original)
                setattr(module, name, counted)
    # No process group exists in a rank; code that checks for one finds the router's world.
    dist.is_initialized = lambda: True
    dist.group.WORLD = dist.GroupMember.WORLD = _NoProcessGroup()
    c10d._get_default_group = _raiser("distributed_c10d._get_default_group")
    # Any other module that imported one of them by name (``from torch.distributed import all_reduce``):
    # of a module indexed before the fork and unchanged since, the names it held them under.
    for name, module in list(sys.modules.items()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        held = _HOLDERS.get(name)
        keys = held[2] if held is not None and held[:2] == (id(module), len(namespace)) else list(namespace)
        for key in keys:
            value = namespace.get(key)
            fake = replace.get(id(value))
            if fake is not None and value is not fake:
                try:  # noqa: SIM105 (the guard keeps to plain statements)
                    setattr(module, key, fake)
                except (AttributeError, TypeError):
                    pass

    from torch._C import _distributed_c10d as cpp
    for cls_name in ("ProcessGroup", "Backend", "ProcessGroupGloo"):
        cls = getattr(cpp, cls_name, None)
        for method, dist_name in GROUP_METHODS.items():
            if dist_name not in allowed and cls is not None and method in cls.__dict__:
                setattr(cls, method, _raiser(f"{cls_name}.{method}"))
    for name in dir(cpp):
        if name.startswith("_") and any(k in name for k in ("broadcast", "allreduce", "all_reduce")):
            setattr(cpp, name, _raiser(f"torch._C._distributed_c10d.{name}"))
    for ns in OP_NAMESPACES:
        setattr(torch.ops, ns, _ForbiddenNamespace(f"torch.ops.{ns}"))
    real_get_operation = torch._C._jit_get_operation

    def get_operation(name, *args, **kwargs):
        if str(name).split("::")[0] in OP_NAMESPACES:
            raise ForbiddenCall(f"torch.ops.{name}")
        return real_get_operation(name, *args, **kwargs)
    torch._C._jit_get_operation = get_operation


def _allowed_roots(input_dir: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(folders readable, folders writable): the interpreter, its packages and this harness; tmp."""
    import sysconfig

    read = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(__file__))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            read.add(path)
    read.update(p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) != os.path.realpath(input_dir))
    write = {os.path.realpath(os.getcwd())}
    read = {os.path.realpath(p) for p in read} | write
    return tuple(sorted(read)), tuple(sorted(write))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _no_stack_for_lazy_device_calls() -> None:
    """``torch.manual_seed`` seeds every device kind lazily (CUDA, XPU, MTIA...):
    their ``_lazy_call`` queues the seeding with ``traceback.format_stack()``,
    which walks frames with ``sys._getframe`` and so would be refused below
    while a learner's code is on the stack. The sandbox has no device to seed
    later, so the calls run when their device is up (never here) and are
    otherwise dropped, stack and all. Every module holding a ``_lazy_call`` of
    torch's (the device package and the modules that imported the name) gets
    the replacement.
    """
    replacements = {}
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        original = getattr(module, "_lazy_call", None) if name.startswith("torch") else None
        owner = sys.modules.get(getattr(original, "__module__", None) or "")
        if original is None or owner is None or not hasattr(owner, "is_initialized"):
            continue
        if id(original) not in replacements:
            def lazy_call(callable, _owner=owner, **_kwargs):  # noqa: A002  (torch's own name)
                if _owner.is_initialized():
                    callable()

            replacements[id(original)] = (original, lazy_call)
        module._lazy_call = replacements[id(original)][1]


_walking: list[bool] = []  # non-empty while a driver walks the heap through `walk`


def walk(walker, *args):
    """``walker(*args)`` (a ``gc`` walker) for a driver, after the learner's code returned: the
    audit hook lets it through only while no frame of the learner's file is on the stack, so a
    learner who calls this, or whose ``__del__`` runs inside the walk, is still refused."""
    _walking.append(True)
    try:
        return walker(*args)
    finally:
        _walking.pop()


def arm(api, *, allowed, submission_path: str, input_dir: str) -> None:
    """Replace the forbidden calls and install the audit hook; there is no way back."""
    _patch_names(api, set(allowed))
    _no_stack_for_lazy_device_calls()
    read_roots, write_roots = _allowed_roots(input_dir)
    submission = os.path.realpath(submission_path)
    learner_files = {submission, submission_path}
    learner_module = "submission"
    busy = []  # the hook's own sys._getframe must not come back into it

    def learner_on_stack() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename in learner_files:
                return True
            frame = frame.f_back
        return False

    def frames_event(event, args) -> bool:
        return event in FRAME_EVENTS or (event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES)

    def hook(event, args):
        if busy:
            return
        if frames_event(event, args):
            busy.append(True)
            try:
                refuse = learner_on_stack()
            finally:
                busy.pop()
            if refuse:
                raise ForbiddenCall(event if event != "object.__getattr__" else args[1], "guard")
            return
        if event == "open":
            path, mode = args[0], args[1]
            if isinstance(path, int) or path is None:
                return
            real = os.path.realpath(os.fsdecode(path))
            writing = mode is not None and any(c in str(mode) for c in "wax+")
            if isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                writing = True
            if real == submission and not writing:
                return
            if _under(real, write_roots) or (not writing and _under(real, read_roots)):
                return
            if not writing and real in ("/dev/null", "/dev/urandom"):
                return
            raise PermissionError(f"the exercise guard refuses to open {os.fsdecode(path)!r}")
        if event.startswith("ctypes."):
            raise ForbiddenCall("ctypes")
        if event == "import" and (args[0] in REFUSED_IMPORTS or str(args[0]).split(".")[0] in ("ctypes", "cffi")):
            raise ForbiddenCall(f"import {args[0]}")
        if event in WALKERS and _walking:
            busy.append(True)
            try:
                refuse = learner_on_stack()
            finally:
                busy.pop()
            if not refuse:
                return  # a driver's own walk (`walk`), with no frame of the learner's below it
        if event in WALKERS or event in PROCESS_EVENTS:
            raise ForbiddenCall(event, "guard")
        if event == "object.__setattr__" and isinstance(args[0], type) \
                and getattr(args[0], "__module__", None) != learner_module:
            raise ForbiddenCall(f"setattr({getattr(args[0], '__name__', 'type')}, {args[1]!r})", "guard")

    sys.addaudithook(hook)
