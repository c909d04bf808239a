"""The `torch` backend: PyTorch's kernels behind nanoeuler's kernel contract, a reference to time ours
against in the same process, on the same card, at the same shapes (`euler bench ops --backend
triton,torch --baseline torch`).

Each variant receives NumPy or CuPy arrays, views them as torch tensors through DLPack (no copy,
_tensors.py), calls the PyTorch function a PyTorch user would call, and hands the results back as
arrays of the same kind (again without a copy). So the bench harness checks and times it like any
other backend: the conformance suite first, then the float64 check, then CUDA events on the
default stream, which CuPy and PyTorch share.

    embedding     embedding       F.embedding + wpe; aten.embedding_dense_backward (what autograd calls)
    layernorm     layer_norm      aten.native_layer_norm and its backward (F.layer_norm's kernels)
    matmul        cublas          torch.addmm / torch.matmul (cuBLAS); backward matmul, addmm_, sum
    attention     sdpa-cudnn      F.scaled_dot_product_attention restricted to one backend each,
                  sdpa-flash      so the report shows every one and the bench's baseline (and
                  sdpa-efficient  --backend auto) picks the fastest at each shape
    gelu          gelu-tanh       F.gelu(approximate="tanh") and aten.gelu_backward
    residual      add             torch.add
    crossentropy  cross_entropy   log_softmax + nll_loss (F.cross_entropy's two kernels), autograd back
    adamw         fused           torch._fused_adamw_, the kernel of torch.optim.AdamW(fused=True)

PyTorch is imported the first time a variant runs, never by this module (nanoeuler imports every
plugin module whenever it lists backends). The variants are registered for "cuda"; `variants("cpu")`
gives the same implementations on the CPU (PyTorch's CPU kernels), which is how the tests check
them on a machine without a GPU.
"""

from euler_core.registry import Backend, Variant, hookimpl

DTYPES = ("float32", "float16", "bfloat16")

#            op              name             implementation                 dtypes on the GPU
_VARIANTS = [
    ("embedding", "embedding", "embedding", DTYPES,
     "F.embedding plus the positions; aten.embedding_dense_backward (sorted, deterministic)"),
    ("layernorm", "layer_norm", "layernorm", DTYPES, "aten.native_layer_norm forward and backward"),
    ("matmul", "cublas", "matmul", DTYPES, "cuBLAS: torch.addmm forward; matmul, addmm_ and sum backward"),
    ("attention", "sdpa-cudnn", "attention:CUDNN", ("float16", "bfloat16"),
     "F.scaled_dot_product_attention, cuDNN backend only"),
    ("attention", "sdpa-flash", "attention:FLASH", ("float16", "bfloat16"),
     "F.scaled_dot_product_attention, FlashAttention-2 backend only"),
    ("attention", "sdpa-efficient", "attention:EFFICIENT", DTYPES,
     "F.scaled_dot_product_attention, memory-efficient backend only"),
    ("gelu", "gelu-tanh", "gelu", DTYPES, "F.gelu(approximate='tanh') and aten.gelu_backward"),
    ("residual", "add", "residual", DTYPES, "torch.add"),
    ("crossentropy", "cross_entropy", "crossentropy", DTYPES,
     "log_softmax + nll_loss (F.cross_entropy), backward through autograd"),
    ("adamw", "fused", "adamw", DTYPES, "torch._fused_adamw_ (torch.optim.AdamW(fused=True))"),
]


def variants(device: str = "cuda", dtypes: dict | None = None) -> list[Variant]:
    """The variants on `device`; `dtypes` overrides the dtypes of some ({variant name: dtypes})."""
    # torch is this distribution's own dependency, not a `requires`: the registry looks modules up with
    # importlib.util.find_spec, which says "not installed" once the triton backend has put its
    # placeholder in sys.modules["torch"] (_tensors.py removes it when a variant first runs)
    requires = ("cupy",) if device == "cuda" else ()
    return [Variant(op, name, impl=f"euler_torch_reference.{impl}", device=device,
                    dtypes=(dtypes or {}).get(name, dt), requires=requires, description=description)
            for op, name, impl, dt, description in _VARIANTS]


@hookimpl
def nanoeuler_backends():
    return [Backend("torch", "PyTorch's kernels on CuPy arrays through DLPack: a benchmark reference, "
                             "not part of nanoeuler", variants("cuda"))]
