"""Three PyTorch models imported, tuned and run with the auto-scheduler (issue 12).

    python examples/torch_models.py [TRIALS_PER_TASK] [MODEL ...]    (default 16 trials per task)

The models are written in plain torch (no torchvision):

    resnet_block   conv3x3-bn-relu-conv3x3-bn + identity skip + relu, 1x64x56x56
                   (the basic block of He et al., "Deep Residual Learning", CVPR 2016)
    mlp            batch 64, 784-512-512-10 with relu and gelu
    transformer    one encoder layer (Vaswani et al., "Attention Is All You Need", 2017), post-norm:
                   batch 1, seq 128, d_model 256, 4 heads, ffn 1024; attention written out with
                   linear q/k/v, bmm, softmax, output projection, residual + layer norm, gelu FFN

For each: ``frontend.from_pytorch`` -> ``extract_tasks`` -> ``TaskScheduler.tune`` (records in a
temporary log) -> ``build_graph`` untuned and under ``ApplyHistoryBest``; prints the max
relative error against torch and the latencies beside torch eager, both at the thread count
of the tuned programs (``torch.set_num_threads``), timed one after the other in this process.  ``MODELS[name]`` is
``(constructor, example_inputs)``; both take the sizes as keywords (``SMALL[name]`` are the
tiny sizes the tests use).
"""

from __future__ import annotations

import math
import pathlib
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere in the checkout
    sys.path.insert(0, str(ROOT))

import scheduler_core as sc  # noqa: E402  (after the sys.path line above)
from scheduler_core.codegen.parallel import default_num_threads  # noqa: E402
from scheduler_core.frontend import from_pytorch  # noqa: E402


class ResNetBlock(nn.Module):
    """The ResNet basic block: two 3x3 convs with batch norm, identity shortcut, relu."""

    def __init__(self, channels: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        for bn in (self.bn1, self.bn2):  # non-trivial inference statistics, as a trained model has
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.2, 0.2)
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class MLP(nn.Module):
    """784-512-512-10 with relu then gelu (erf form)."""

    def __init__(self, d_in: int = 784, hidden: int = 512, d_out: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)
        self.act1 = nn.ReLU()
        self.act2 = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


class TransformerEncoderLayer(nn.Module):
    """A post-norm encoder layer with the attention written out (no nn.MultiheadAttention)."""

    def __init__(self, d_model: int = 256, heads: int = 4, ffn: int = 1024, dropout: float = 0.1):
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn)
        self.ff2 = nn.Linear(ffn, d_model)
        self.act = nn.GELU()
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B*H, T, d_head)
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.d_head).transpose(1, 2).reshape(b * self.heads, s, self.d_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.d_head)
        attn = self.drop(torch.softmax(scores, dim=-1))
        ctx = torch.bmm(attn, v).view(b, self.heads, s, self.d_head).transpose(1, 2).reshape(b, s, d)
        x = self.norm1(x + self.drop(self.out(ctx)))
        return self.norm2(x + self.drop(self.ff2(self.act(self.ff1(x)))))


def _seeded(ctor):
    def make(**sizes):
        torch.manual_seed(0)
        return ctor(**sizes).eval()
    return make


def _input(*shape):
    def make(**sizes):
        g = torch.Generator().manual_seed(1)
        return (torch.randn(*[sizes.get(k, v) for k, v in shape], generator=g),)
    return make


MODELS = {
    "resnet_block": (_seeded(lambda channels=64, **_: ResNetBlock(channels)),
                     _input(("batch", 1), ("channels", 64), ("size", 56), ("size", 56))),
    "mlp": (_seeded(lambda d_in=784, hidden=512, d_out=10, **_: MLP(d_in, hidden, d_out)),
            _input(("batch", 64), ("d_in", 784))),
    "transformer": (_seeded(lambda d_model=256, heads=4, ffn=1024, **_: TransformerEncoderLayer(d_model, heads, ffn)),
                    _input(("batch", 1), ("seq", 128), ("d_model", 256))),
}
SMALL = {
    "resnet_block": {"channels": 8, "size": 8},
    "mlp": {"batch": 4, "d_in": 32, "hidden": 16, "d_out": 5},
    "transformer": {"seq": 8, "d_model": 16, "heads": 2, "ffn": 32},
}


def load(name: str, **sizes):
    """``(module, example_inputs, graph)`` for ``MODELS[name]`` at ``sizes``."""
    ctor, inputs = MODELS[name]
    module, xs = ctor(**sizes), inputs(**sizes)
    return module, xs, from_pytorch(module, xs)


def max_rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want| / max |want|`` (the scale-aware relative error)."""
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def torch_eager_s(module, xs, number: int = 20) -> float:
    """Median seconds of one eager forward pass (no grad) over 5 rounds of ``number`` calls."""
    with torch.no_grad():
        module(*xs)
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(number):
                module(*xs)
            rounds.append((time.perf_counter() - t0) / number)
    return float(np.median(rounds))


def tune_model(graph, trials_per_task: int, log: str, target: str = "llvm", **options):
    """Extract the tasks of ``graph`` and tune them together with the gradient task scheduler
    (``trials_per_task`` x the number of tasks trials in all, rounds of at most 16); records go
    to ``log``; ``options`` are more TuningOptions fields (``verbose=1`` prints the per-task
    progress table after every round).  Returns ``(TaskScheduler, wall seconds)``."""
    tasks, weights = sc.extract_tasks(graph, target)
    sched = sc.TaskScheduler(tasks, weights)
    t0 = time.perf_counter()
    if trials_per_task > 0:
        options.setdefault("num_measures_per_round", max(1, min(trials_per_task, 16)))
        options.setdefault("verbose", 0)
        opts = sc.TuningOptions(num_measure_trials=trials_per_task * len(tasks),
                                measure_callbacks=[sc.RecordToFile(log)], **options)
        sched.tune(opts)
    return sched, time.perf_counter() - t0


def speed_text(ours_s: float, theirs_s: float) -> str:
    """``"1.30x faster"`` / ``"2.00x slower"``: our time beside theirs."""
    ratio = theirs_s / ours_s
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def main(argv: list) -> None:
    trials = int(argv[0]) if argv else 16
    names = argv[1:] or list(MODELS)
    threads = default_num_threads()  # what the tuned programs' parallel loops use
    torch.set_num_threads(threads)  # torch eager at the same thread count
    for name in names:
        module, xs, graph = load(name)
        with torch.no_grad():
            want = module(*xs).numpy()
        x_np = [x.numpy() for x in xs]
        untuned = sc.build_graph(graph)
        t_untuned = untuned.time_evaluator(number=5, repeat=3)(*x_np).median
        with tempfile.TemporaryDirectory() as d:
            log = f"{d}/{name}.json"
            sched, wall = tune_model(graph, trials, log)
            print(sched.progress_table(wall))
            if trials > 0:
                with sc.ApplyHistoryBest(log):
                    lib = sc.build_graph(graph)
            else:
                lib = untuned
        got = lib(*x_np)
        t_tuned = lib.time_evaluator(number=10, repeat=3)(*x_np).median
        t_torch = torch_eager_s(module, xs)
        weights = [int(w) for w in sched.weights]
        print(f"{name}: {len(graph.calls)} calls, {len(sched.tasks)} tasks (weights {weights}), "
              f"{trials} trials/task, tuning {wall:.0f} s")
        print(f"  max rel error vs torch {max_rel_error(got, want):.2e}")
        print(f"  at {threads} thread(s) each (torch.get_num_threads() = {torch.get_num_threads()}): "
              f"untuned {t_untuned * 1e3:.3f} ms   tuned {t_tuned * 1e3:.3f} ms   "
              f"torch eager {t_torch * 1e3:.3f} ms   (tuned is {speed_text(t_tuned, t_torch)} than torch eager)")


if __name__ == "__main__":
    main(sys.argv[1:])
