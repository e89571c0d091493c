"""Transparency check: the unmodified Hugging Face transformers Trainer, run with and without TRANSIT.

    python3 bench/hf_trainer.py --out native.json
    python3 -m transit run --policy advise --mem-limit 1G --out DIR -- python3 bench/hf_trainer.py --out t.json

A randomly initialised small Llama (LlamaConfig, fixed seed) trained for a few dozen steps on
the benchmark's synthetic token stream, with deterministic kernels. Nothing in the
Trainer is changed or subclassed: a forward hook on the model reads each step's exact loss
(the Trainer's own log rounds it), and both are written to JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULT_SCHEMA, provenance, write_json
from model import ModelConfig, synthetic_batch

SEED = 0
SEQ_LEN = 512
VOCAB = 32000


def llama_config():
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=VOCAB, max_position_embeddings=SEQ_LEN)
    # Eager attention: deterministic in backward (SDPA's fused kernels may not be).
    config._attn_implementation = "eager"
    return config


class TokenDataset(torch.utils.data.Dataset):
    """The benchmark's bigram token stream (bench/model.py), one sequence per item."""

    def __init__(self, sequences: int) -> None:
        stream = ModelConfig(dim=0, n_layers=0, n_heads=1, n_kv_heads=1, ffn_dim=0, vocab_size=VOCAB,
                             seq_len=SEQ_LEN)
        inputs, _ = synthetic_batch(stream, SEED, 0, sequences)
        self.inputs = inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.inputs[i], "labels": self.inputs[i]}


def main(argv: list[str] | None = None) -> int:
    from transformers import LlamaForCausalLM, Trainer, TrainingArguments, set_seed

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--label", default="hf-trainer")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    # Deterministic kernels, set here rather than through the Trainer's full_determinism, which
    # raises on any op without a deterministic implementation; this warns instead.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    set_seed(SEED)
    model = LlamaForCausalLM(llama_config())
    losses: list[float] = []
    model.register_forward_hook(
        lambda module, inputs, output: losses.append(output.loss.item()) if module.training else None)
    with tempfile.TemporaryDirectory() as tmp:
        training_args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=args.batch, max_steps=args.steps, learning_rate=3e-4,
            logging_steps=1, save_strategy="no", report_to=[], seed=SEED,
            bf16=torch.cuda.is_available(), dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=TokenDataset(args.steps * args.batch))
        trainer.train()
        logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    doc = {
        "schema": RESULT_SCHEMA, "system": args.label, "runner": "bench/hf_trainer.py", **provenance(),
        "config": {"trainer": "transformers.Trainer (unmodified)", "model": "LlamaForCausalLM, random init",
                   "llama_config": llama_config().to_dict(), "steps": args.steps, "batch": args.batch,
                   "seq_len": SEQ_LEN, "seed": SEED, "deterministic_algorithms": "warn_only"},
        "losses": losses, "trainer_logged_losses": logged,
    }
    write_json(args.out, doc)
    print(f"{args.label}: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
