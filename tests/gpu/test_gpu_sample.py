"""GPU tier: the greedy-sampling kernel (models/ops/sample.py) against torch.argmax, replayed in a
CUDA graph as a decode step runs it (its arrival counters must be back at zero after every replay)."""

from __future__ import annotations

import pytest
import torch

from rooflint.models.ops import sample

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_greedy_argmax_in_a_graph_matches_torch_every_replay(dtype):
    device = torch.device("cuda")
    padded = torch.empty(8, 50304, dtype=dtype, device=device)
    logits = padded[:, :50257]  # the triton set's padded lm_head, read in place
    tokens = torch.full((8, 16), -1, dtype=torch.long, device=device)
    token = torch.empty(8, 1, dtype=torch.long, device=device)
    ws = sample.GreedyWorkspace(8, 50257, device)
    sample.greedy_argmax(logits, tokens[:, 5:6], token, ws)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sample.greedy_argmax(logits, tokens[:, 5:6], token, ws)
    for seed in range(5):
        padded.copy_(torch.randn(8, 50304, generator=torch.Generator().manual_seed(seed)).to(dtype))
        graph.replay()
        torch.cuda.synchronize()
        expected = logits.float().argmax(-1)
        assert torch.equal(tokens[:, 5], expected) and torch.equal(token[:, 0], expected)
        assert int(ws.counters.abs().sum()) == 0
    assert (tokens[:, :5] == -1).all() and (tokens[:, 6:] == -1).all()
