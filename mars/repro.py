"""Reproducible CPU kernels across machines, and the machine facts every run records (issue 41).

torch and MKL pick their kernels per CPU: ATen's vector width (``ATEN_CPU_CAPABILITY``: AVX-512 where the CPU has
it, else AVX2, else none) and MKL's code path for the fp32 matrix products of every linear layer (on AMD its Zen
kernels, on Intel the widest branch). Other kernels sum in another order, so the same commit, config and seed can
train models that differ in the last bits after a few steps and in whole answers after thousands.
``benchmarks/kernel_knobs.py`` measured which choices change a short training's weights on one machine: ATen's
capability and MKL's branch did; oneDNN's ISA cap, ``torch.use_deterministic_algorithms`` and the thread count
(under the native kernels) did not.

The ``reproducible`` kernel mode pins both to code every x86-64 CPU with AVX2 runs alike: ATen's AVX2 kernels and
MKL's ``COMPATIBLE`` branch (SSE2 code, the same on Intel and AMD) on one thread (that branch's bits depend on MKL's
thread count, and its ``STRICT`` form did not change that: measured). ``native`` leaves the choices to the libraries.
The variables are read when torch first runs a kernel, so :func:`apply_kernel_mode` must run before anything in the
process computes; it checks that they took effect.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
from pathlib import Path

from mars.pipeline.config import ConfigError

KERNEL_MODES = ("native", "reproducible")
# what a process's environment may set to choose its CPU kernels (oneDNN's cap too: fp32 training does not use it)
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
MODE_ENV = {"native": {}, "reproducible": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}}
# what torch.backends.cpu.get_cpu_capability() and MKL report once the reproducible mode is in effect
REPRODUCIBLE_STATE = {"cpu_capability": "AVX2", "mkl_cbwr": "COMPATIBLE"}
# MKL's conditional-numerical-reproducibility branches (mkl_cbwr.h; 1: none set, MKL chooses per CPU)
_CBWR_NAMES = {0: "OFF", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 8: "SSE4_2", 9: "AVX", 10: "AVX2"}
_CBWR_NAMES.update({12: "AVX512", 14: "AVX512_E1"})
_CBWR_STRICT = 0x10000


class KernelModeError(ConfigError):
    """The kernel mode could not take effect: torch had already chosen its kernels in this process."""


def reproducible_env(mode: str = "reproducible") -> dict[str, str]:
    """The environment variables that select ``mode``'s kernels (read when torch first runs a kernel)."""
    if mode not in MODE_ENV:
        raise ValueError(f"kernel mode must be one of {', '.join(KERNEL_MODES)}, got {mode!r}")
    return dict(MODE_ENV[mode])


@functools.cache
def _torch_library():
    """torch's CPU library, which carries MKL (linked in) and exports MKL's service functions; None if not found."""
    import torch

    try:
        return ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    except OSError:
        return None


def _mkl_function(name: str, restype=ctypes.c_int, argtypes=()):
    lib = _torch_library()
    function = getattr(lib, name, None) if lib is not None else None
    if function is not None:
        function.restype, function.argtypes = restype, list(argtypes)
    return function


def mkl_cbwr() -> str | None:
    """MKL's branch in effect ("OFF": MKL chooses per CPU; "COMPATIBLE": the reproducible mode's), None where
    unreadable. Asking makes MKL read ``MKL_CBWR``, as its first computation would."""
    getter = _mkl_function("mkl_serv_cbwr_get", argtypes=[ctypes.c_int])
    if getter is None:
        return None
    value = getter(-1)  # MKL_CBWR_ALL: the branch and the STRICT flag
    name = _CBWR_NAMES.get(value & 0xFFFF, str(value & 0xFFFF))
    return name + (",STRICT" if value & _CBWR_STRICT else "")


def mkl_threads() -> int | None:
    """The threads MKL would use for a computation started in the calling thread (None where unreadable)."""
    getter = _mkl_function("MKL_Get_Max_Threads")
    return getter() if getter is not None else None


def pin_mkl_threads() -> bool:
    """Run MKL on one thread in the calling thread, whatever ``torch.set_num_threads`` says (it sets MKL's
    thread-local count too: call this after it). MKL's COMPATIBLE branch splits a matrix product's rows over its
    threads with edge kernels that sum in another order (measured: ``addmm`` of a 362 x 128 input differs between
    one and two threads), so its bits depend on the thread count unless MKL keeps to one; ATen's own kernels did
    not. False where MKL is not reachable."""
    setter = _mkl_function("MKL_Set_Num_Threads_Local", argtypes=[ctypes.c_int])
    if setter is None:
        return False
    setter(1)
    return True


def kernel_state() -> dict:
    """The kernels this process runs: ATen's vector capability and MKL's branch (both fixed once first used)."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "mkl_cbwr": mkl_cbwr()}


def mode_in_effect(state: dict | None = None) -> str:
    """The kernel mode this process runs, read from its kernels (:func:`kernel_state`) and MKL's thread count."""
    state = state or kernel_state()
    pinned = all(state.get(k) == v for k, v in REPRODUCIBLE_STATE.items()) and mkl_threads() in (1, None)
    return "reproducible" if pinned else "native"


def apply_kernel_mode(mode: str) -> dict:
    """Select ``mode``'s kernels in this process and return :func:`kernel_state`. ``reproducible`` sets its variables
    (over any value the environment gave them), keeps MKL to one thread (:func:`pin_mkl_threads`: call this again
    after ``torch.set_num_threads``) and raises KernelModeError when the variables did not take effect: torch had
    already run a kernel in this process (start it with :func:`reproducible_env`'s variables, or call this first).
    ``native`` changes nothing."""
    os.environ.update(reproducible_env(mode))
    state = kernel_state()
    if mode == "reproducible":
        pin_mkl_threads()
        wrong = {k: state[k] for k, v in REPRODUCIBLE_STATE.items() if state[k] is not None and state[k] != v}
        if wrong:
            raise KernelModeError(
                "kernel mode 'reproducible' could not take effect: this process already runs "
                + ", ".join(f"{k} {v}" for k, v in wrong.items())
                + "; set "
                + " ".join(f"{k}={v}" for k, v in reproducible_env(mode).items())
                + " before it starts"
            )
    return state


def kernel_mode_callback(mode: str):
    """A Trainer callback that applies the kernel mode again when training begins: after the Trainer's set-up,
    which may have set torch's thread count (accelerate does on a multi-process CPU launch) and with it MKL's.
    (transformers is imported here, so that the tables can read machine facts without it.)"""
    from transformers import TrainerCallback

    class KernelModeCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            apply_kernel_mode(mode)

    return KernelModeCallback()


def _cpuinfo() -> dict:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines()) if k.strip()}


def _library_versions() -> dict:
    import torch

    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    onednn = re.search(r"MKL-DNN v([\d.]+)", config)
    return {"torch": torch.__version__, "mkl": mkl and mkl.group(1), "onednn": onednn and onednn.group(1)}


def machine_facts(mode: str | None = None) -> dict:
    """What made this process's numbers: the CPU (model name, family/model/stepping, the vector ISAs it offers), the
    kernels in effect (ATen's capability, MKL's branch and threads, the variables that chose them), torch's thread
    count, the library versions and the kernel ``mode`` (None: the one in effect, :func:`mode_in_effect`). Reading
    them fixes the kernels (see :func:`kernel_state`)."""
    import torch

    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    isas = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile") if f in flags]
    state = kernel_state()
    return {
        "kernel_mode": mode or mode_in_effect(state),
        "cpu_model": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_id": "/".join(info.get(k, "?") for k in ("cpu family", "model", "stepping")) if info else None,
        "cpu_isas": ",".join(isas),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        **state,
        "mkl_threads": mkl_threads(),
        "kernel_variables": {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ},
        **_library_versions(),
    }


def machine_class(facts: dict | None) -> str:
    """One line for a table: the CPU, the kernels and the kernel mode that produced a row's model ('' if unknown)."""
    if not facts:
        return ""
    threads = facts.get("threads")
    return (
        f"{facts.get('cpu_model')} ({facts.get('cpu_id')}), {facts.get('cpu_capability')} + MKL "
        f"{facts.get('mkl_cbwr')}, {threads} thread{'' if threads == 1 else 's'}, torch {facts.get('torch')}, "
        f"{facts.get('kernel_mode')} kernels"
    )
