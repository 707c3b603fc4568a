"""``python -m flashref.gpu.occupancy``: kernel 3's registers, shared memory and CTAs per SM, compiled on a CPU.

How many CTAs share an SM decides how many walk a head's tiles at once, and so the L2 model's waves
(:mod:`flashref.schedule`). This compiles each of kernel 3's default launches (the forward per head
dimension and causal flag, the dK/dV kernel and the dQ kernel) for sm_90 with Triton 3.6.0's Gluon, without
a GPU: placeholder tensors (``triton.runtime.jit.MockTensor``) stand in for the inputs, and
``cuobjdump --dump-resource-usage`` reads the cubin. Each row sets what the build takes beside what
:func:`flashref.schedule._k3_ctas_per_sm` assumes.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import tempfile

N_PLACEHOLDER = 4096  # rows of the placeholder (B·H·N, d) views: the build does not depend on it


def _desc(gl, rows, d, dtype=None):
    from triton.runtime.jit import MockTensor

    from .kernel3 import _TensorDescriptor
    dtype = dtype or gl.float16
    layout = gl.NVMMASharedLayout.get_default_for([rows, d], dtype)
    return _TensorDescriptor(MockTensor(dtype, [N_PLACEHOLDER, d]), [N_PLACEHOLDER, d], [d, 1], [rows, d], layout)


def _compile(jitfn, args, constexprs, num_warps):
    """A Gluon kernel built for sm_90 from placeholder arguments (no GPU, no launch)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    params = list(inspect.signature(jitfn.fn).parameters)
    signature = {p: "constexpr" if p in constexprs else mangle_type(args[p]) for p in params}
    constants = {(params.index(p),): v for p, v in constexprs.items()}
    return triton.compile(GluonASTSource(jitfn, signature, constants), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps))


def _resources(compiled) -> dict:
    """Registers a thread and stack bytes of a build, from cuobjdump (Triton ships it)."""
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    regs, stack = re.search(r"REG:(\d+) STACK:(\d+)", out).groups()
    return dict(regs=int(regs), stack=int(stack))


def compile_fwd(d, causal, t):
    """Kernel 3's forward with tiles ``t`` (Tiles3) built for sm_90 (no GPU)."""
    from triton.runtime.jit import MockTensor

    from . import kernel3 as k3
    gl = k3.gl
    args = dict(desc_q=_desc(gl, t.box_rows, d), desc_k=_desc(gl, t.block_n, d), desc_v=_desc(gl, t.block_n, d),
                desc_o=_desc(gl, t.box_rows, d), L2=MockTensor(gl.float32),
                N=N_PLACEHOLDER, qk_scale=0.5, BH=1)
    common = dict(HEAD_D=d, BLOCK_M=t.block_m, BLOCK_N=t.block_n, STAGES=t.stages, CAUSAL=causal, HEADS_FIRST=False)
    if t.pingpong:
        args["counter"] = MockTensor(gl.int32)  # Tiles3.dynamic's tile counter
        return _compile(k3._k3ws_fwd_kernel, args, dict(common, EMU=t.emu, PERSISTENT=t.persistent, Q_REGS=t.q_regs,
                                                         Q_PREFETCH=t.q_prefetch, DYNAMIC=t.dynamic,
                                                         CONSUMER_REGS=k3.PINGPONG_REGS[t.consumers], num_warps=4), 4)
    return _compile(k3._k3_fwd_kernel, args, dict(common, num_warps=t.warps), t.warps)


def compile_dkdv(d, causal, tb):
    """Kernel 3's dK/dV kernel with tiles ``tb`` built for sm_90 (no GPU)."""
    from triton.runtime.jit import MockTensor

    from . import kernel3 as k3
    from . import kernel3_bwd as kb
    gl = k3.gl
    f32, f16 = MockTensor(gl.float32), MockTensor(gl.float16)
    args = dict(desc_q=_desc(gl, tb.block_m, d), desc_do=_desc(gl, tb.block_m, d), desc_k=_desc(gl, tb.block_n, d),
                desc_v=_desc(gl, tb.block_n, d),
                desc_dq=_desc(gl, tb.block_m, d, gl.float32) if tb.tma_dq else _desc(gl, tb.block_m, d),
                L2=f32, Dd=f32, dQacc=f32, dK_out=f16, dV_out=f16, N=N_PLACEHOLDER, qk_scale=0.5, sm_scale=0.125, BH=1)
    return _compile(kb._k3b_dkdv_kernel, args, dict(
        HEAD_D=d, BLOCK_M=tb.block_m, BLOCK_N=tb.block_n, STAGES=tb.stages, CAUSAL=causal, DQ=tb.dq,
        VEC4=tb.vec4, PIPE=tb.pipe, WIDE=tb.wide, PERSISTENT=tb.persistent, KV_REGS=tb.kv_regs,
        CONSUMER_REGS=kb.BWD_REGS, num_warps=4), 4)


def compile_dq(d, causal, tq):
    """Kernel 3's dQ kernel with tiles ``tq`` (TilesQ) built for sm_90 (no GPU)."""
    from triton.runtime.jit import MockTensor

    from . import kernel3 as k3
    from . import kernel3_bwd as kb
    gl = k3.gl
    f32, f16 = MockTensor(gl.float32), MockTensor(gl.float16)
    args = dict(desc_q=_desc(gl, 128, d), desc_do=_desc(gl, 128, d), desc_k=_desc(gl, tq.block_n, d),
                desc_v=_desc(gl, tq.block_n, d), L2=f32, Dd=f32, dQ_out=f16, N=N_PLACEHOLDER, qk_scale=0.5,
                sm_scale=0.125)
    return _compile(kb._k3q_kernel, args, dict(HEAD_D=d, BLOCK_N=tq.block_n, STAGES=tq.stages, CAUSAL=causal,
                                               PINGPONG=tq.pingpong, QDO_REGS=tq.qdo_regs,
                                               CONSUMER_REGS=kb.BWD_REGS, num_warps=4), 4)


def builds() -> list[dict]:
    """One row per default launch: kernel, d, causal, warps, registers a thread, stack, shared memory (bytes),
    CTAs per SM as compiled (registers and shared memory) and as the L2 model assumes."""
    from .. import schedule as S  # noqa: N812
    from . import kernel3 as k3
    from . import kernel3_bwd as kb
    if k3._MODS is None:  # Gluon 3.6.0 is missing; a GPU is not needed
        raise RuntimeError(f"kernel 3 cannot be built here: {k3._WHY}")
    rows = []

    def row(kernel, d, causal, compiled, model):
        r = dict(kernel=kernel, d=d, causal=causal, warps=compiled.metadata.num_warps,
                 shared=compiled.metadata.shared, **_resources(compiled))
        rows.append(dict(r, ctas_per_sm=S._k3_ctas_per_sm(r["shared"], r["warps"], r["regs"]),
                         model_ctas_per_sm=model))

    for (d, causal), t in sorted(k3.TILES.items()):
        c = compile_fwd(d, causal, t)
        row("forward", d, causal, c, S.flashref3_fwd(1, N_PLACEHOLDER, N_PLACEHOLDER, d, causal, sms=1).resident)
    for (d, causal), tb in sorted(kb.BWD_TILES.items()):
        c = compile_dkdv(d, causal, tb)
        row("dK/dV", d, causal, c, S.flashref3_dkdv(1, N_PLACEHOLDER, N_PLACEHOLDER, d, causal, sms=1).resident)
        c = compile_dq(d, causal, tb.dq_tiles)
        row("dQ", d, causal, c, S.flashref3_dq(1, N_PLACEHOLDER, N_PLACEHOLDER, d, causal, sms=1).resident)
    return rows


def main(argv=None) -> int:
    import argparse

    # no options: the parser gives --help (which used to start the builds) and refuses anything else by name
    argparse.ArgumentParser(prog="python -m flashref.gpu.occupancy", description=__doc__.split("\n")[0]).parse_args(
        argv)
    try:
        rows = builds()
    except (RuntimeError, ImportError) as e:
        print(f"python -m flashref.gpu.occupancy needs Triton 3.6.0 (kernel 3's Gluon): {e}", file=sys.stderr)
        return 1
    print(f"{'kernel':8} {'d':>4} {'causal':6} {'warps':>5} {'regs':>4} {'stack':>5} {'shared':>7} "
          f"{'CTAs/SM':>7} {'model':>5}")
    for r in rows:
        print(f"{r['kernel']:8} {r['d']:4d} {r['causal']!s:6} {r['warps']:5d} {r['regs']:4d} {r['stack']:5d} "
              f"{r['shared']:7d} {r['ctas_per_sm']:7d} {r['model_ctas_per_sm']:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
