"""Fine-tune a GPT-2 folder on your own text, fully or with LoRA, and write a GPT-2 folder back.

    python examples/finetune_gpt2.py --init-from gpt2 --data examples/data/shop_products.txt
    python examples/finetune_gpt2.py --init-from gpt2 --lora-rank 8 --lora-alpha 16 --out-dir out-gpt2-lora

--init-from is a Hugging Face GPT-2 folder already on disk (config.json, model.safetensors, and
tokenizer.json or vocab.json + merges.txt); nothing is downloaded. The text is cut into windows
of --block-size tokens (GPT-2's byte-pair tokens), the last 10% held out. The val loss on that
held-out text is shown before the first step and after the last. With --lora-rank, only the
low-rank adapters on attention's c_attn and c_proj train (tinygrad_gpu/nn/lora.py); at the end
they are merged into the weights. --out-dir receives a GPT-2 folder that this project and
`transformers` both load, and, for LoRA, the adapter alone in adapter.safetensors.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.data import TextDataset, read_text  # noqa: E402
from tinygrad_gpu.nn import GPT, lora  # noqa: E402
from tinygrad_gpu.optim.lr_scheduler import warmup_cosine  # noqa: E402
from tinygrad_gpu.tokenizers import GPT2Tokenizer  # noqa: E402
from tinygrad_gpu.train import compute, one_line_errors, precision  # noqa: E402
from tinygrad_gpu.train.energy import EnergyMeter, kwh as energy_kwh  # noqa: E402
from tinygrad_gpu.train.loop import estimate_loss, training_step  # noqa: E402
from tinygrad_gpu.train.reporting import cost_line, run_totals  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init-from", required=True, help="a Hugging Face GPT-2 folder on disk")
    p.add_argument("--data", default=os.path.join(HERE, "data", "shop_products.txt"), help="a UTF-8 text file")
    p.add_argument("--out-dir", default="out-gpt2-finetune")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the default device)")
    p.add_argument("--dtype", default=None, choices=precision.CHOICES,
                   help="float32, or bfloat16 / float16 under autocast (default: bfloat16 on a GPU of compute "
                        "capability 8.0 and up, float16 on older GPUs, float32 on the CPU)")
    p.add_argument("--block-size", type=int, default=128, help="tokens per window (at most the model's context)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-iters", type=int, default=100)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-4 full, 1e-3 LoRA)")
    p.add_argument("--warmup-iters", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lora-rank", type=int, default=0, help="0: train every weight; r > 0: LoRA of rank r")
    p.add_argument("--lora-alpha", type=float, default=16.0)
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute each block in backward instead of keeping its activations (less memory, one "
                   "more forward pass per step; the same gradients)")
    p.add_argument("--eval-interval", type=int, default=25)
    p.add_argument("--eval-iters", type=int, default=10)
    p.add_argument("--sample-tokens", type=int, default=80, help="tokens to generate at the end (0: none)")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--price-per-hour", type=float, default=None, help="adds the run's cost to its last line")
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = 1e-3 if args.lora_rank else 1e-4      # adapters start at zero and need larger steps
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = tg.device.canonical(args.device)
    tg.manual_seed(args.seed)
    tokenizer = GPT2Tokenizer(args.init_from)
    model = GPT.from_pretrained(args.init_from, dropout=args.dropout)
    block_size = min(args.block_size, model.config.block_size)
    dataset = TextDataset(read_text(args.data), block_size, tokenizer, device=device)
    model.to(device)
    if args.lora_rank:
        lora.apply_lora(model, rank=args.lora_rank, alpha=args.lora_alpha)
    trained = [p for p in model.parameters() if p.requires_grad]
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {sum(p.numel() for p in trained):,} "
          f"trained ({'LoRA rank %d' % args.lora_rank if args.lora_rank else 'all'}); "
          f"train {len(dataset.splits['train']):,} / val {len(dataset.splits['val']):,} tokens; device {device}")
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    optimizer = model.configure_optimizers(args.weight_decay, args.lr, (0.9, 0.95))
    rng = np.random.default_rng(args.seed)
    with one_line_errors():                     # a GPU without bfloat16, say: one line, exit code 2
        run_precision = precision.Precision.for_run(args.dtype, device)
    print(f"computing in {run_precision.name}")

    before = estimate_loss(model, dataset, args, precision=run_precision)
    print(f"iter 0: train {before['train']:.4f}, val {before['val']:.4f}")
    meter = EnergyMeter(device)                 # NVML on a GPU, RAPL on a Linux CPU, else nothing
    start = time.perf_counter()
    for iter_num in range(1, args.max_iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = warmup_cosine(iter_num - 1, args.lr, args.warmup_iters, args.max_iters, args.lr / 10)
        x, y = dataset.batch("train", args.batch_size, rng)
        loss, _ = training_step(model, optimizer, [(x, y)], args.grad_clip, run_precision)
        if iter_num % args.eval_interval == 0 or iter_num == args.max_iters:
            losses = estimate_loss(model, dataset, args, precision=run_precision)
            print(f"iter {iter_num}: loss {loss.item():.4f}; train {losses['train']:.4f}, val {losses['val']:.4f}; "
                  f"{(time.perf_counter() - start) / iter_num:.2f} s per step")
    seconds = time.perf_counter() - start
    after = estimate_loss(model, dataset, args, precision=run_precision)
    print(f"val loss on the new text: {before['val']:.4f} before fine-tuning, {after['val']:.4f} after "
          f"{args.max_iters} iterations")
    # What the run cost, counted as every training run counts it (6N + 12LCT per token, even for LoRA,
    # which skips the frozen weights' gradients: the usual accounting, so MFUs compare)
    peak, _ = compute.peak_flops(device, run_precision.low_dtype or model.transformer.wte.weight.dtype)
    joules = meter.joules()
    totals = run_totals(args.max_iters * args.batch_size * block_size, model.flops_per_token(), seconds, peak,
                        args.price_per_hour, None if joules is None else energy_kwh(joules))
    print(cost_line(totals, args.price_per_hour))

    adapter = lora.lora_state_dict(model) if args.lora_rank else None
    if adapter:
        lora.merge(model)                       # plain GPT-2 weights again, for the folder below
    model.save_pretrained(args.out_dir, tokenizer=tokenizer)
    if adapter:
        tg.save(adapter, os.path.join(args.out_dir, "adapter.safetensors"))
    print(f"wrote a GPT-2 folder to {args.out_dir}" + (" (and the adapter: adapter.safetensors)" if adapter else ""))

    samples = []
    if args.sample_tokens:
        prompt = tg.tensor(tokenizer.encode(args.prompt)[None, :], device=device)
        out = model.generate(prompt, args.sample_tokens, temperature=0.8, top_k=50, use_cache=True)
        samples = [tokenizer.decode(out.numpy()[0])]
        print("---\n" + samples[0] + "\n---")
    return {"before": before, "after": after, "samples": samples, "model": model}


if __name__ == "__main__":
    main()
