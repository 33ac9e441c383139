"""Run a loaded model with one kernel set: a prefill forward, and greedy generation over the KV cache.

Generation: the prompt's prefill appends every position's K and V and yields token 0; decode step
i (1..N-1) feeds token i-1 at position P+i-1 and writes token i. On a GPU each decode step is
captured in its own CUDA graph before the timed run (the cache length, and so the attention's
launch arguments, differ per step), and the greedy loop replays them back to back with no host
synchronisation: the argmax writes the next input token inside the graph.
"""

from __future__ import annotations

import torch

from rooflint.kernels.common.pdl import decode_chain
from rooflint.models.base import LoadedModel, OpRecorder
from rooflint.models.cache import KVCache


class Runner:
    def __init__(self, loaded: LoadedModel, kernels, batch: int, prompt: int, new_tokens: int) -> None:
        self.loaded, self.kernels = loaded, kernels
        self.spec, self.weights, self.dims = loaded.spec, loaded.weights, loaded.dims
        self.batch, self.prompt, self.new_tokens = batch, prompt, new_tokens
        self.device = loaded.device
        self.rec = OpRecorder()
        self.cache: KVCache | None = None
        self.graphs: list[torch.cuda.CUDAGraph] | None = None
        self.graph_note = ""
        self.token = torch.zeros((batch, 1), dtype=torch.long, device=self.device)  # the next input token
        self.tokens = torch.zeros((batch, max(new_tokens, 1)), dtype=torch.long, device=self.device)
        self._prefill = self._prefill_eager
        self._decode_step = self._step_eager
        if kernels.compiled:
            self._prefill = torch.compile(self._prefill_eager, dynamic=False)
            # dynamic: the position is symbolic, so one compiled step serves every cache length
            self._decode_step = torch.compile(self._step_eager, dynamic=True)

    # ---- prefill ------------------------------------------------------------------------
    def _prefill_eager(self, ids: torch.Tensor) -> torch.Tensor:
        return self.spec.forward(self.weights, self.kernels, ids, 0, None, self.rec)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits at every position of ``ids`` [B, T], no cache: the prefill phase."""
        return self._prefill(ids)

    # ---- generation ---------------------------------------------------------------------
    def _allocate_cache(self) -> KVCache:
        if self.cache is None:
            d = self.dims
            self.cache = KVCache(
                d.layers, self.batch, d.kv_heads, d.head_dim, self.prompt + self.new_tokens,
                self.loaded.dtype, self.device,
            )  # fmt: skip
            self.cache.symbolic = self.kernels.compiled
        return self.cache

    @torch.no_grad()
    def start(self, prompt_ids: torch.Tensor) -> None:
        """Prefill the prompt into the cache and pick token 0. Runs eager in every set (one call)."""
        cache = self._allocate_cache()
        logits = self.spec.forward(self.weights, self.kernels, prompt_ids, 0, cache, self.rec, last_only=True)
        with self.rec("sample"):
            self.kernels.sample(logits.reshape(self.batch, -1), self.tokens[:, :1], self.token)

    def _step(self, position: int, index: int) -> None:
        # A decode step is a chain of dependent kernels replayed from a graph: the kernels that
        # support it launch with programmatic dependent launch there (kernels/common/pdl.py).
        with decode_chain():
            self._decode_step(position, index)

    def _step_eager(self, position: int, index: int) -> None:
        logits = self.spec.forward(self.weights, self.kernels, self.token, position, self.cache, self.rec, True)
        with self.rec("sample"):
            # narrow, not [:, index]: torch.compile keeps a narrow's start symbolic (no recompile per step)
            self.kernels.sample(logits.reshape(self.batch, -1), self.tokens.narrow(1, index, 1), self.token)

    def step_positions(self) -> list[tuple[int, int]]:
        """(position fed, token index written) of each decode step."""
        return [(self.prompt + i - 1, i) for i in range(1, self.new_tokens)]

    @torch.no_grad()
    def step(self, index: int) -> None:
        """Decode step ``index`` launched op by op (what the profiler attributes)."""
        self._step(self.prompt + index - 1, index)

    @torch.no_grad()
    def capture(self) -> None:
        """One CUDA graph per decode step, sharing one memory pool (they replay in capture order)."""
        if self.device.type != "cuda" or self.graphs is not None:
            return
        self._allocate_cache()
        steps = self.step_positions()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # Warm-up outside capture: Triton compiles and autotunes, workspaces and slot tables are
            # allocated. Its writes land at positions each step overwrites before reading them.
            for position, index in steps:
                self._step(position, index)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        graphs = []
        try:
            for position, index in steps:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self._step(position, index)
                graphs.append(graph)
        except Exception as error:  # a kernel that cannot be captured: decode runs launched op by op
            self.graph_note = f"decode not graphed ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
            torch.cuda.synchronize()
            return
        self.graphs = graphs
        self.graph_note = f"decode: {len(graphs)} CUDA graphs, one per step"

    @torch.no_grad()
    def decode(self) -> None:
        """Every decode step, from the state start() left."""
        if self.graphs is not None:
            for graph in self.graphs:
                graph.replay()
            return
        for position, index in self.step_positions():
            self._step(position, index)

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor) -> torch.Tensor:
        """Greedy tokens [B, N] for the prompt."""
        self.start(prompt_ids)
        self.decode()
        return self.tokens.clone()

    def release(self) -> None:
        self.graphs = None
        self.cache = None
