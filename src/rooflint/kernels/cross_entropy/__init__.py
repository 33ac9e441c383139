"""cross_entropy: the mean token loss over a large vocabulary, forward and backward, as training runs it.

Two forms, chosen by the ``hidden`` size key:

- ``hidden=0``: from the logits [tokens, vocab] and the targets: (loss, dlogits). Memory-bound:
  the logits are read and their gradient written; 8192 tokens of Llama-3's 128256-word vocabulary
  are 2 GB of bf16 each way.
- ``hidden>0``: from the last hidden states x [tokens, hidden] and the output projection
  W [vocab, hidden], with logits = x Wᵀ: (loss, dx, dW). Three GEMMs make it compute-bound; what
  differs between implementations is memory. The plain forms hold the whole logits (and their
  gradient); the fused-linear forms (Liger's and quack's product, and ``triton_chunked`` here) run
  the tokens in chunks and never hold more than one chunk's logits. The ``peak_extra_memory_bytes``
  column records it.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn

# The reference computes this many tokens' float64 logits at a time: the whole 8192 x 128256 would be
# 8 GB, and it keeps three such tensors.
REFERENCE_CHUNK = 1024


def make_inputs(params, dtype, device, generator):
    tokens, vocab, hidden = params["tokens"], params["vocab"], params["hidden"]
    target = torch.randint(0, vocab, (tokens,), device=device, generator=generator)
    if not hidden:
        return {"logits": randn([tokens, vocab], dtype, device, generator), "target": target}
    # W scaled by hidden^-1/2 so the logits have unit variance, as a trained head's are near.
    weight = (randn([vocab, hidden], torch.float32, device, generator) * hidden**-0.5).to(dtype)
    return {"x": randn([tokens, hidden], dtype, device, generator), "weight": weight, "target": target}


def _loss_and_dlogits(z, target, tokens):
    """float64 sum of the chunk's token losses and its dlogits (softmax - onehot) / tokens."""
    lse = torch.logsumexp(z, dim=-1)
    picked = z.gather(1, target[:, None]).squeeze(1)
    dz = torch.softmax(z, dim=-1)
    dz[torch.arange(len(target), device=z.device), target] -= 1.0
    return (lse - picked).sum(), dz / tokens


def reference(inputs, params):
    tokens, hidden = params["tokens"], params["hidden"]
    target = inputs["target"]
    if not hidden:
        loss, dz = _loss_and_dlogits(inputs["logits"].double(), target, tokens)
        return loss / tokens, dz
    x, w = inputs["x"].double(), inputs["weight"].double()
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    dx, dw = torch.empty_like(x), torch.zeros_like(w)
    for start in range(0, tokens, REFERENCE_CHUNK):
        rows = slice(start, start + REFERENCE_CHUNK)
        part, dz = _loss_and_dlogits(x[rows] @ w.T, target[rows], tokens)
        loss += part
        dx[rows] = dz @ w
        dw += dz.T @ x[rows]
    return loss / tokens, dx, dw


def cost(params, dtype):
    tokens, vocab, hidden, size = params["tokens"], params["vocab"], params["hidden"], element_size(dtype)
    logits = tokens * vocab
    # per logit: the running max, subtract, exp, add (the log-sum-exp); subtract, exp, scale and the
    # target's -1 (the gradient)
    softmax_flops = 8 * logits
    if not hidden:
        return Cost(
            cuda_flops=softmax_flops,
            bytes=logits * size  # read the logits
            + tokens * 8  # read the targets (int64)
            + logits * size  # write dlogits
            + 4,  # write the loss
        )
    return Cost(
        # x Wᵀ (the logits), dlogits W (dx) and dlogitsᵀ x (dW): 2 FLOPs a multiply-add each
        tensor_flops=3 * 2 * logits * hidden,
        cuda_flops=softmax_flops,
        bytes=tokens * hidden * size  # read x
        + vocab * hidden * size  # read W
        + tokens * 8  # read the targets
        + tokens * hidden * size  # write dx
        + vocab * hidden * size  # write dW
        + 4,  # write the loss; the logits need never reach HBM (the fused-linear forms keep them on chip)
    )


FAMILY = Family(
    "cross_entropy",
    summary="mean cross-entropy over a large vocabulary with its gradient; from logits or fused with the head",
    sizes={
        "small": [{"tokens": 257, "vocab": 5003, "hidden": 0}, {"tokens": 257, "vocab": 5003, "hidden": 96}],
        # Llama-3's vocabulary and hidden size at 8192 tokens a step: the logits are 2 GB in bf16.
        "large": [{"tokens": 8192, "vocab": 128256, "hidden": 0}, {"tokens": 8192, "vocab": 128256, "hidden": 4096}],
    },
    # No fp16: the mean-reduced gradient is about 1 / (tokens x vocab), 1e-9 at the large size, under
    # fp16's smallest subnormal (6e-8), so dW of the fused-linear form underflows in every
    # implementation, PyTorch's included (2.8% off on an H100). bf16 keeps fp32's exponent, and
    # training runs this loss in bf16 or fp32.
    dtypes=("fp32", "bf16"),
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


def leaves(case) -> tuple[torch.Tensor, ...]:
    """The tensors the gradient is taken with respect to: the logits, or x and W."""
    if case.params["hidden"]:
        return case["x"], case["weight"]
    return (case["logits"],)


def with_grads(loss_fn, tensors, target):
    """(loss, *gradients) of ``loss_fn(*tensors, target)`` by autograd: forward and backward, as a
    training step runs them. Grad mode is switched on: bench builds references under no_grad."""
    with torch.enable_grad():
        inputs = [t.detach().requires_grad_() for t in tensors]
        loss = loss_fn(*inputs, target)
        grads = torch.autograd.grad(loss, inputs)
    return (loss.detach().float(), *grads)


def _logits(args):
    return args[0] if len(args) == 1 else torch.nn.functional.linear(args[0], args[1])


def loss_unfused(*args):
    """log-sum-exp minus the target's logit, in fp32, as separate ops (``args``: logits or x, W; then target)."""
    *tensors, target = args
    z = _logits(tensors).float()
    return (torch.logsumexp(z, dim=-1) - z.gather(1, target[:, None]).squeeze(1)).mean()


def loss_builtin(*args):
    """F.cross_entropy on the logits (after F.linear for x, W)."""
    *tensors, target = args
    return torch.nn.functional.cross_entropy(_logits(tensors), target)


def _bind(case, loss_fn):
    tensors, target = leaves(case), case["target"]
    return lambda: with_grads(loss_fn, tensors, target)


@FAMILY.variant("eager_unfused")
def eager_unfused(case):
    """fp32 upcast, logsumexp, gather and mean as separate ops; backward by autograd"""
    return _bind(case, loss_unfused)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """F.cross_entropy (after F.linear), forward and autograd backward"""
    return _bind(case, loss_builtin)


@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused fp32 form; its backward compiled by AOTAutograd"""
    return _bind(case, torch.compile(loss_unfused, dynamic=False))


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of F.cross_entropy (after F.linear); its backward compiled by AOTAutograd"""
    return _bind(case, torch.compile(loss_builtin, dynamic=False))


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.cross_entropy import library, triton  # noqa: E402, F401
