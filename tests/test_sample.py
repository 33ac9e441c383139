"""The greedy-sampling kernel (models/ops/sample.py) against torch.argmax, in Triton's interpreter."""

import pytest
import torch

from rooflint.models.ops import sample


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows,vocab", [(1, 7), (3, 4096), (8, 4097), (5, 50257)])
def test_greedy_argmax_matches_torch(rows, vocab, dtype):
    generator = torch.Generator().manual_seed(rows * vocab)
    logits = torch.randn(rows, vocab, generator=generator).to(dtype)
    tokens = torch.full((rows, 4), -1, dtype=torch.long)
    token = torch.full((rows, 1), -1, dtype=torch.long)
    ws = sample.GreedyWorkspace(rows, vocab, logits.device)
    sample.greedy_argmax(logits, tokens.narrow(1, 2, 1), token, ws)
    expected = logits.float().argmax(-1)
    assert torch.equal(tokens[:, 2], expected) and torch.equal(token[:, 0], expected)
    assert (tokens[:, [0, 1, 3]] == -1).all()  # only the step's column is written
    assert (ws.counters == 0).all()  # reset for the next call


def test_ties_go_to_the_lowest_index_across_chunks():
    vocab = 3 * sample.CHUNK + 11
    logits = torch.zeros(2, vocab)
    logits[0, [5000, 9000, vocab - 1]] = 3.0  # equal maxima in chunks 1, 2 and 3: the first wins
    logits[1, [vocab - 1, 17]] = 2.0
    tokens, token = torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)
    ws = sample.GreedyWorkspace(2, vocab, logits.device)
    for _ in range(2):  # a second call reuses the counters the first left at zero
        sample.greedy_argmax(logits, tokens, token, ws)
        assert tokens[:, 0].tolist() == [5000, 17] == token[:, 0].tolist()


def test_strided_rows_of_a_padded_head_are_read_in_place():
    padded = torch.randn(4, 50304)
    logits = padded[:, :50257]  # the triton set's lm_head: vocab padded, then viewed back
    tokens, token = torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 1, dtype=torch.long)
    sample.greedy_argmax(logits, tokens, token, sample.GreedyWorkspace(4, 50257, logits.device))
    assert torch.equal(token[:, 0], logits.argmax(-1))


def test_token_ids_must_be_int64():
    logits = torch.randn(2, 10)
    with pytest.raises(ValueError, match="int64"):
        sample.greedy_argmax(logits, torch.zeros(2, 1, dtype=torch.int32), torch.zeros(2, 1, dtype=torch.long),
                              sample.GreedyWorkspace(2, 10, logits.device))  # fmt: skip
