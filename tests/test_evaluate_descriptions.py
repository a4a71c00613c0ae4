"""examples/evaluate_descriptions.py: its plain measures of generated descriptions, and the loss of the held-out
descriptions, which must be the mean over every counted token of all the products, whatever the batches."""
import numpy as np
import pytest

import tinygrad_gpu as tg
from conftest import example
from tinygrad_gpu import records
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.nn import functional as F
from tinygrad_gpu.tokenizers import CharTokenizer


def test_ingredients_named_and_copied_sentences_are_counted_as_stated():
    evaluate = example("evaluate_descriptions")
    training = set(evaluate.sentences("Colloidal oat calms dry skin in a week or two. Fragrance free.", 6))
    assert training == {"colloidal oat calms dry skin in a week or two."}      # 'Fragrance free.' is too short
    rows = [{"key_ingredients": ["colloidal oat", "Glycerin"],
             "generated": "With GLYCERIN. Colloidal  oat calms dry skin in a week or two. Fragrance free."},
            {"key_ingredients": ["squalane"], "generated": "A light oil. Fragrance free."}]
    measured = evaluate.fit(rows, training, 6)
    # glycerin named (any case); 'colloidal  oat' with two spaces is not the ingredient's words; squalane missing
    assert measured == {"ingredients_named": pytest.approx(1 / 3), "copied": 0.5}


def test_the_description_loss_is_the_mean_over_all_counted_tokens():
    evaluate = example("evaluate_descriptions")
    tokenizer = CharTokenizer("\nabcdefgh:")
    examples = [("ab:", "cdef"), ("a:", "b"), ("h:", "gggggggg"), ("c:", "d")]
    tg.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=tokenizer.vocab_size))
    device = tg.device.default_device()
    model.to(device)
    loss = evaluate.description_loss(model, tokenizer, examples, device, batch_size=3)
    losses = []
    for prompt, completion in examples:       # each example alone, every counted token's loss summed
        rows, _ = records.completion_rows([(prompt, completion)], 32, tokenizer)
        x, y = (tg.tensor(rows[0][i][None], device=device) for i in (0, 1))
        with tg.no_grad():
            logits = model.eval()(x)[0].numpy()[0]
        kept = rows[0][1] >= 0
        losses.append(F.cross_entropy(tg.tensor(logits[kept], device="cpu"), tg.tensor(rows[0][1][kept], device="cpu"),
                                      reduction="sum").item())
    counted = sum(len(tokenizer.encode(c)) + 1 for _, c in examples)
    np.testing.assert_allclose(loss, sum(losses) / counted, rtol=1e-5)
