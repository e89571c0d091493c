"""TRANSIT's Python iteration hook.

`transit run` and the Slurm plugin put this directory first on PYTHONPATH, so every Python
process of a task imports this module at startup (site.py imports `sitecustomize`). Most of
those processes do not train (torchrun's agent, data workers, tools), so this module imports
nothing heavy: it only installs an import watcher. When the program itself imports
torch.optim, it registers a global optimizer-step post-hook that calls libtransit's
transit_pyhook_mark_iteration(), found in the process through ctypes. Without libtransit in the
process, nothing is registered.

Because this file shadows any other sitecustomize on sys.path, it runs the next one after its
own directory too.

It imports nothing that site.py has not imported already: even importlib costs a millisecond in
a clean venv (it imports warnings), importlib.util six (contextlib, collections). The import
system's own classes are reached through what is loaded.
"""

import os
import sys

ModuleSpec = type(sys.__spec__)  # importlib.machinery.ModuleSpec
# importlib.machinery.PathFinder: the finder of sys.path entries, always on sys.meta_path.
PathFinder = next(finder for finder in sys.meta_path if getattr(finder, "__name__", None) == "PathFinder")

WATCHED_MODULE = "torch.optim"
MARK_SYMBOL = "transit_pyhook_mark_iteration"
# Tells libtransit the hook is in place, so its kernel-period detector (which finds sub-step
# periods such as micro-batches) does not drive the policies before the first optimizer step.
ARMED_SYMBOL = "transit_pyhook_armed"


def _register_step_hook() -> None:
    import ctypes  # only in processes that import torch.optim

    process = ctypes.CDLL(None)
    try:
        mark, armed = getattr(process, MARK_SYMBOL), getattr(process, ARMED_SYMBOL)
    except AttributeError:  # libtransit is not preloaded in this process
        return
    for fn in (mark, armed):
        fn.restype = None
        fn.argtypes = []
    optimizer = sys.modules.get("torch.optim.optimizer")
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is None:  # torch older than 2.0
        return

    def mark_iteration(_optimizer: object, _args: object, _kwargs: object) -> None:
        mark()

    register(mark_iteration)
    armed()


class _HookAfterExec:
    """Wraps the loader of torch.optim: runs it, then registers the hook."""

    def __init__(self, loader: object) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> object:
        return self.loader.create_module(spec)

    def exec_module(self, module: object) -> None:
        # The module keeps its real loader (importlib.resources and friends look at it).
        module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        _register_step_hook()


class OptimImportWatcher:
    """A sys.meta_path finder that only acts on the first import of torch.optim."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> ModuleSpec | None:
        if fullname != WATCHED_MODULE:
            return None
        sys.meta_path.remove(self)  # one shot, and the finders below must not find us again
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookAfterExec(spec.loader)
                return spec
        return None


def _run_shadowed_sitecustomize() -> None:
    # abspath, not realpath: string work only, no system calls at every interpreter start.
    here = os.path.dirname(os.path.abspath(__file__))
    resolved = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    start = resolved.index(here) + 1 if here in resolved else 0
    after = [entry for entry, real in zip(sys.path[start:], resolved[start:]) if real != here]
    spec = PathFinder.find_spec("sitecustomize", after)
    if spec is not None and spec.loader is not None:
        from importlib.util import module_from_spec  # only where there is one to run

        spec.loader.exec_module(module_from_spec(spec))


sys.meta_path.insert(0, OptimImportWatcher())
_run_shadowed_sitecustomize()
