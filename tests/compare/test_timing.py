"""Which metric names are timing or memory figures (left out of the comparison, listed), on the
names real training scripts log; and how a comparison treats them."""

from __future__ import annotations

import numpy as np
import pytest

from repro_check.compare.steps import Comparison, Policy
from repro_check.compare.timing import is_timing
from repro_check.trace import values
from repro_check.trace.values import Tolerance

#: names that differ in every run: throughput, times, model FLOPs utilisation, memory
TIMING_NAMES = [
    # CleanRL (TensorBoard) and Stable-Baselines3
    "tb:charts/SPS", "SPS", "rollout/fps", "time/fps", "time/time_elapsed",
    # HF Trainer (and its eval_ / test_ twins), wandb's own keys
    "hf:train_runtime", "train_samples_per_second", "train_steps_per_second", "eval_runtime",
    "eval_samples_per_second", "eval_steps_per_second", "wandb:_runtime", "wandb:_timestamp",
    # nanoGPT
    "mfu", "train/mfu", "dt",
    # timm
    "rate", "rate_avg", "batch_time", "data_time",
    # PyTorch examples, Lightning and common habits
    "Time", "epoch_time", "train/time", "lightning:train_time_epoch", "iter_time", "step_time_ms",
    "elapsed", "duration", "timestamp", "latency_ms", "time_per_step", "sec_per_iter",
    "throughput", "perf/throughput", "tokens_per_sec", "trainSamplesPerSecond", "it/s",
    "samples/s", "tflops",
    # memory
    "memory", "max_memory_allocated", "gpu_mem", "mem_gb", "peak_memory_mb",
]
#: names that are the training's results: compared
COMPARED_NAMES = [
    "loss", "accuracy", "val_time_series_acc", "time_series_loss", "timesteps",
    "time/total_timesteps", "time/iterations", "global_step", "hf:total_flos", "lr",
    "learning_rate", "train/learning_rate", "charts/learning_rate", "losses/value_loss",
    "losses/approx_kl", "losses/clipfrac", "losses/explained_variance", "charts/episodic_return",
    "charts/episodic_length", "rollout/ep_rew_mean", "train/n_updates", "eval_loss",
    "eval_accuracy", "epoch", "grad_norm", "top1", "top5", "acc@1", "Acc@1", "error_rate",
    "dropout_rate", "success_rate", "sample_rate_hz", "num_tokens", "perplexity", "iter",
    "train/loss", "val/loss", "val/acc", "train_loss_epoch", "printed:accuracy",
    "tb:eval/accuracy", "return", "mse",
]


@pytest.mark.parametrize("name", TIMING_NAMES)
def test_timing_and_memory_figures(name: str) -> None:
    assert is_timing(name)


@pytest.mark.parametrize("name", COMPARED_NAMES)
def test_results_of_the_training(name: str) -> None:
    assert not is_timing(name)


def comparison(policy: Policy, sps: tuple[float, float], acc: tuple[float, float]) -> Comparison:
    cmp = Comparison(2, policy)
    for run in (1, 2):
        for s in (1, 2):
            cmp.add_step(run, s, {"loss": values.encode(np.float32(1.0 / s))})
        cmp.end(run, 2)
        cmp.set_metrics(run, {"tb:charts/SPS": values.encode(sps[run - 1]),
                              "tb:charts/episodic_return": values.encode(acc[run - 1])})
    return cmp


def test_a_timing_metric_is_listed_not_compared_unless_asked() -> None:
    res = comparison(Policy(), (812.5, 790.25), (1.5, 1.5)).result()
    assert res.reproducible and res.metrics_skipped == ["tb:charts/SPS"]
    assert res.metrics_compared == 1 and len(res.groups) == 1
    # the other metric still counts: a difference there is one
    assert not comparison(Policy(), (812.5, 790.25), (1.5, 2.5)).result().reproducible
    # a tolerance given for the name, or a --metric rule of it, has it compared
    forced = Policy(per_name={"metric:tb:charts/SPS": Tolerance()})
    res = comparison(forced, (812.5, 790.25), (1.5, 1.5)).result()
    assert not res.reproducible and res.divergent_signal == "metric:tb:charts/SPS"
    assert res.metrics_skipped == [] and res.metrics_compared == 2
    assert Policy(always_metrics=frozenset({"printed:sps"})).skips_metric("printed:sps") is False
