"""TRL's real ``GRPOTrainer`` against ``gym-repost serve``, with a tiny model built here (no hub).

What it does, on the CPU, with nothing downloaded:

1. starts ``gym-repost serve tasks/demo.jsonl`` in a subprocess, with a short
   ``--session-timeout`` (15 s by default);
2. trains a byte-level BPE tokenizer on local text (the demo repository, its task
   statements, this package's sources) and gives it Qwen2.5's chat template (the copy TRL
   ships, so that TRL parses the tool calls), and builds a randomly initialised Qwen2
   model of about 0.3 M parameters;
3. warm-starts the model on one demonstration: the conversation in which the assistant
   calls ``write_code`` with a task's ground truth (the shortest once its docstrings are
   removed), then ``submit``, with the real tool results (a served episode). Without it
   no rollout of a random model would ever make a valid tool call; with it, sampled
   rollouts sometimes do and sometimes do not, which is what GRPO learns from. The other
   task of the dataset is never shown (its reward stays 0);
4. trains with ``GRPOTrainer(environment_factory=functools.partial(ServedTask, url),
   reward_funcs=reward_func)`` for ``--steps`` steps; after step 1 a callback pauses for
   longer than the session timeout (a long training step), so the server closes the
   trainer's idle sessions and the next batch's ``reset`` reopens them;
5. calls ``close_all()`` and appends a record (steps, each step's task and rewards, the
   reconnections, sessions left open, wall times, versions, the machine and its load) to
   ``benchmarks/results/trl_grpo.jsonl``.

This shows the wiring with the real trainer, not learning: the model is taught the answer
first. Needs ``pip install torch==<a CPU build>`` first, then ``pip install "gym-repost[trl]"``.

Usage::

    python benchmarks/trl_grpo.py [--steps 10] [--warm-steps 400] [--session-timeout 15] [--no-record]
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.metadata
import inspect
import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now, start_serve
from gym_repost.serve.trl import DEFAULT_PROMPT, ServedTask, close_all, dataset_rows, open_sessions, reward_func
from gym_repost.task import FunctionTask, load_tasks

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tasks" / "demo.jsonl"
VERSIONS = ("trl", "transformers", "torch", "tokenizers", "openenv-core")


def start_server(session_timeout: float) -> tuple[subprocess.Popen[str], str]:
    """``gym-repost serve`` on a free port; its process and URL."""
    return start_serve(TASKS, "--max-sessions", "8", "--workers", "2", "--session-timeout", str(session_timeout))


def offered_tools(env: ServedTask) -> list[Any]:
    """The methods TRL offers the model, in its order (``inspect.getmembers``)."""
    names = [n for n, _ in inspect.getmembers(type(env), inspect.isfunction) if not n.startswith("_")]
    return [getattr(env, n) for n in names if n not in ("reset", "get_reward")]


def without_docstrings(code: str) -> str:
    """``code`` with its docstrings removed (a shorter answer to learn)."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and ast.get_docstring(node):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def demonstration(url: str, task: FunctionTask, code: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """The conversation that solves ``task`` with ``code`` (real tool results, from a
    served episode) and the tools it was offered."""
    with ServedTask(url) as env:
        row = next(r for r in dataset_rows(url) if r["task_id"] == task.id)
        user = row["prompt"][-1]["content"] + env.reset(**row)
        written = env.write_code(code)
        verdict = env.submit()
        assert env.reward == 1.0, verdict
        tools = offered_tools(env)

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        function = {"name": name, "arguments": arguments}
        return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": function}]}

    messages = [
        {"role": "user", "content": user},
        call("write_code", {"code": code}),
        {"role": "tool", "name": "write_code", "content": written},
        call("submit", {}),
        {"role": "tool", "name": "submit", "content": verdict},
        {"role": "assistant", "content": "Done."},
    ]
    return messages, tools


def local_texts(tasks: list[FunctionTask]) -> list[str]:
    """What the tokenizer learns from: the served repository, the statements, our sources."""
    texts = [text for task in tasks for text in task.repository.files.values()]
    texts += [path.read_text(encoding="utf-8") for path in sorted((ROOT / "gym_repost").rglob("*.py"))]
    return texts


def build_tokenizer(texts: list[str], conversation: str) -> Any:
    """A byte-level BPE trained here, with Qwen2.5's chat template (as TRL ships it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([*texts, conversation], trainer)
    bpe.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    return tokenizer


def build_model(tokenizer: Any, seed: int) -> Any:
    """A randomly initialised Qwen2 of a few hundred thousand parameters."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def warm_start(model: Any, tokenizer: Any, messages: list[dict[str, Any]], tools: list[Any], steps: int) -> float:
    """Next-token training on the demonstration; returns the last loss."""
    import torch

    ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)
    batch = torch.tensor([ids])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss = 0.0
    for _ in range(steps):
        output = model(input_ids=batch, labels=batch)
        output.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss = float(output.loss.detach())
    return loss


def grpo(
    options: argparse.Namespace, url: str, rows: list[dict[str, Any]], model: Any, tokenizer: Any
) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer on the served tasks; what it did."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    batches: list[dict[str, Any]] = []

    def rewards(environments: list[ServedTask], **kwargs: Any) -> list[float]:
        values = reward_func(environments)
        batches.append({"task_ids": sorted({e.task_view["id"] for e in environments}), "rewards": values})
        return values

    step_seconds: list[float] = []

    class LongStep(TrainerCallback):
        """Times each step; after step 1, pauses for longer than the session timeout (a
        long training step: the server closes the idle sessions meanwhile)."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.began = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step_seconds.append(time.perf_counter() - self.began)
            if state.global_step == 1:
                time.sleep(options.session_timeout * 2 + 2)

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=options.steps,
            per_device_train_batch_size=options.generations,
            num_generations=options.generations,
            max_completion_length=options.max_completion_length,
            max_tool_calling_iterations=3,
            temperature=options.temperature,
            learning_rate=1e-4,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=options.seed,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=rewards,
            train_dataset=Dataset.from_list(rows),
            environment_factory=functools.partial(ServedTask, url),
            args=config,
            callbacks=[LongStep()],
        )
        environments = trainer._environment_pool[None]
        started = time.perf_counter()
        try:
            trainer.train()
        finally:
            seconds = time.perf_counter() - started
            held = open_sessions()
            closed = close_all()
        logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    return {
        "rows": [r["task_id"] for r in rows],
        "environments": len(environments),
        "sessions_open_after_training": held,
        "sessions_closed_by_close_all": closed,
        "sessions_open_after_close_all": open_sessions(),
        "reconnections": sum(env.reconnections for env in environments),
        "seconds": seconds,
        "pause_seconds_after_step_1": options.session_timeout * 2 + 2,
        "steps": [
            {
                "step": index + 1,
                "task_ids": batch["task_ids"],
                "rewards": batch["rewards"],
                "mean_reward": sum(batch["rewards"]) / len(batch["rewards"]),
                "tool_calls_per_rollout": log.get("tools/call_frequency"),
                "tool_failures_per_rollout": log.get("tools/failure_frequency"),
                "completion_mean_tokens": log.get("completions/mean_length"),
                "seconds": seconds,
            }
            for index, (batch, log, seconds) in enumerate(zip(batches, logs + [{}] * len(batches), step_seconds))
        ],
    }


def run(options: argparse.Namespace) -> dict[str, Any]:
    tasks: list[FunctionTask] = [t for t in load_tasks(TASKS) if isinstance(t, FunctionTask)]
    process, url = start_server(options.session_timeout)
    try:
        started = time.perf_counter()
        learned = min(tasks, key=lambda t: len(without_docstrings(t.ground_truth)))
        unseen = next(t for t in tasks if t is not learned)
        rows = [r for r in dataset_rows(url, kind="function") if r["task_id"] in (learned.id, unseen.id)]
        messages, tools = demonstration(url, learned, without_docstrings(learned.ground_truth))
        conversation = str(messages)
        tokenizer = build_tokenizer(local_texts(tasks), conversation)
        model = build_model(tokenizer, options.seed)
        built = time.perf_counter()
        loss = warm_start(model, tokenizer, messages, tools, options.warm_steps)
        warmed = time.perf_counter()
        trained = grpo(options, url, rows, model, tokenizer)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    return {
        "learned_task": learned.id,
        "unseen_task": unseen.id,
        "tokenizer_vocab": len(tokenizer),
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "build_seconds": built - started,
        "warm_start": {"steps": options.warm_steps, "final_loss": loss, "seconds": warmed - built},
        "grpo": trained,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="GRPO steps.")
    parser.add_argument("--generations", type=int, default=4, help="Rollouts per prompt (one batch).")
    parser.add_argument("--max-completion-length", type=int, default=512, help="Tokens per rollout.")
    parser.add_argument("--warm-steps", type=int, default=400, help="Next-token steps on the demonstration.")
    parser.add_argument("--session-timeout", type=float, default=15.0, help="The server's --session-timeout.")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature of the rollouts.")
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads (1: steady on a busy machine).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-record", action="store_true", help="Print only.")
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("gym_repost.serve.trl").setLevel(logging.INFO)  # the reconnections
    record: dict[str, Any] = {"date": now(), "machine": machine(), "benchmark": "trl_grpo"}
    record["versions"] = {name: importlib.metadata.version(name) for name in VERSIONS}
    record["settings"] = {k: v for k, v in vars(options).items() if k != "no_record"}
    record["prompt"] = DEFAULT_PROMPT
    import torch

    torch.set_num_threads(options.threads)
    record["results"] = run(options)
    record["load_average_after"] = machine()["load_average"]
    print(json.dumps(record["results"], indent=1))
    if not options.no_record:
        print(f"appended to {append_record('trl_grpo', record)}")


if __name__ == "__main__":
    main()
