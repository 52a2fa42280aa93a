"""The codes of ``repro-check doctor``'s findings: what each hazard is, why, how to fix it.

A code is stable (docs/doctor-codes.md documents each), so a team can silence it on a line, for
the project in pyproject.toml (read by :mod:`repro_check.config`) or with ``--ignore``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from repro_check.errors import UsageError


#: where every code is documented, relative to the project's root (SARIF's rules link to it)
DOCS_PAGE = "docs/doctor-codes.md"


@dataclass(frozen=True)
class Code:
    """One kind of hazard: what it is, why it matters, how to fix it."""

    code: str
    title: str
    why: str
    fix: str


CODES: dict[str, Code] = {c.code: c for c in (
    Code("RC101", "DataLoader workers while nothing seeds torch with a fixed value",
         "Each worker seeds Python's random, torch and numpy's global generator from a base seed "
         "the loader draws from its generator or, without one, from torch's default generator; "
         "nothing in the files read seeds that with a fixed value, so every run's workers start "
         "from different seeds.",
         "Seed torch once at start-up (torch.manual_seed(SEED), or seed_everything/set_seed), or "
         "pass generator=torch.Generator().manual_seed(SEED)."),
    Code("RC102", "cudnn.benchmark = True",
         "cuDNN times several convolution kernels on the first batches and keeps the fastest; "
         "the choice depends on timing noise, and different kernels give different bits.",
         "Set torch.backends.cudnn.benchmark = False (repro-check's runs do, unless the script "
         "turns it back on)."),
    Code("RC103", "cudnn.deterministic turned off",
         "cuDNN may then use kernels with atomic adds whose summation order changes from run to "
         "run. torch.backends.cudnn.flags() sets deterministic=False unless told otherwise.",
         "Set torch.backends.cudnn.deterministic = True, and pass deterministic=True to "
         "cudnn.flags()."),
    Code("RC104", "seed taken from the clock or OS entropy",
         "A seed from time.time(), datetime.now(), os.urandom(), uuid4() or the process id is "
         "different in every run (hash() of a string and id() differ between processes too), so "
         "everything it seeds differs, whatever seed repro-check or the user asked for.",
         "Take the seed from a constant or a command-line option, and log it."),
    Code("RC105", "reseeding from a nondeterministic source",
         "torch.seed(), random.seed(), numpy.random.seed() and Generator.seed() without a value "
         "pick a fresh seed from OS entropy or the clock, throwing away the seeding before them.",
         "Pass an explicit seed (torch.manual_seed(SEED), random.seed(SEED)) or remove the call."),
    Code("RC106", "random generator created without a seed",
         "numpy.random.default_rng(), RandomState(), SeedSequence(), the bit generators and "
         "random.Random() without a seed start from OS entropy; seeding the global generators "
         "(what repro-check does) does not reach them.",
         "Pass a seed: numpy.random.default_rng(SEED), random.Random(SEED)."),
    Code("RC107", "iteration over a set decides an order",
         "A set iterates in hash order. Strings hash differently in every process unless "
         "PYTHONHASHSEED is fixed (repro-check's runs fix it, a plain `python train.py` does not), "
         "and objects hash by memory address; data order, vocabulary ids or layer order built "
         "from the loop change with it.",
         "Iterate over sorted(the_set), or keep the items in a list or dict, which keep "
         "insertion order."),
    Code("RC108", "op with no deterministic CUDA implementation",
         "PyTorch lists this op (in the form shown) as nondeterministic on CUDA, usually through "
         "atomic adds in its backward pass; with torch.use_deterministic_algorithms(True), which "
         "repro-check's runs turn on, it raises RuntimeError instead of running.",
         "Use an equivalent with a deterministic implementation (e.g. mode='nearest', "
         "AvgPool2d with a fixed kernel, padding_mode='replicate', a CPU computation for "
         "histc/bincount), or accept run-to-run differences on CUDA."),
    Code("RC109", "op nondeterministic on CUDA unless deterministic algorithms are on",
         "PyTorch lists this op as nondeterministic on CUDA (atomic adds, so the summation order "
         "changes between runs); it switches to a deterministic implementation only under "
         "torch.use_deterministic_algorithms(True).",
         "Call torch.use_deterministic_algorithms(True) (and set "
         "CUBLAS_WORKSPACE_CONFIG=:4096:8) in every run that must reproduce."),
    Code("RC110", "deterministic algorithms turned off or warn-only",
         "The script turns off what makes PyTorch raise on nondeterministic ops, overriding "
         "repro-check's setting; with warn_only=True such ops still run nondeterministically.",
         "Remove the call, or call torch.use_deterministic_algorithms(True) without warn_only."),
    Code("RC111", "OS entropy used directly",
         "os.urandom(), the secrets module and random.SystemRandom read the operating system's "
         "entropy pool, which no seed controls; whatever they feed differs in every run.",
         "Draw from a seeded generator (random.Random(SEED), numpy.random.default_rng(SEED))."),
    Code("RC112", "DataLoader(in_order=False)",
         "With in_order=False the loader yields batches in the order worker processes finish "
         "them, which depends on scheduling.",
         "Leave in_order at its default, True."),
    Code("RC113", "directory listing iterated unsorted",
         "os.listdir(), os.scandir(), glob.glob() and Path.glob()/iterdir() return entries in "
         "file-system order, which differs between machines, file systems and copies of the "
         "data set; data order and label ids built from it change with it.",
         "Iterate over sorted(...) of the listing."),
    Code("RC114", "training that never seeds torch",
         "Nothing in the files read seeds torch (torch.manual_seed, seed_everything, set_seed, "
         "...), and torch's default generator starts from OS entropy: model initialisation, "
         "dropout and DataLoader shuffling differ between runs. repro-check's own runs seed "
         "torch; a plain `python train.py` does not.",
         "Call torch.manual_seed(SEED) (or lightning's seed_everything(SEED), transformers' "
         "set_seed(SEED)) before the model is built; take SEED from a constant or an option."),
    Code("RC115", "seed drawn from an unseeded random stream",
         "The seed is drawn from Python's random, numpy's global generator or torch's default "
         "generator before anything seeds that stream with a fixed value; those start from OS "
         "entropy, so the seed, and everything it seeds, differs in every run.",
         "Take the seed from a constant or a command-line option with a default, and log it."),
    Code("RC116", "environment reset or action sampled without a seed",
         "gymnasium draws an environment's generator from OS entropy when reset() gets no seed "
         "before a seeded one, and an action space's sample() draws from the space's own "
         "generator, which nothing seeds unless action_space.seed() is called: the observations "
         "and the random actions differ in every run, whatever seeds torch, numpy or Python.",
         "Call env.reset(seed=SEED) once (the first reset; later resets go on from it) and "
         "env.action_space.seed(SEED) before sampling actions."),
    Code("RC117", "torch.compile with inductor's determinism settings off",
         "A compiled model runs the kernels inductor generated: with autotuning it picks them by "
         "timing (which can change from run to run, and with a fresh cache), and its random "
         "draws are not eager mode's unless fallback_random is on.",
         "Set torch._inductor.config.deterministic = True (or TORCHINDUCTOR_DETERMINISTIC=1) "
         "and torch._inductor.config.fallback_random = True where the runs must reproduce "
         "(since PyTorch 2.10 torch.use_deterministic_algorithms(True) sets the first, not "
         "fallback_random); compare eager and compiled with repro-check --across compile=off,on."),
    Code("RC118", "TF32 (or bfloat16) for float32 matmuls or convolutions",
         "TF32 keeps 10 bits of a float32's mantissa in matmuls and convolutions on Ampere and "
         "newer GPUs, and not at all on older ones or the CPU: the results, and goldens "
         "recorded with them, change with the GPU generation, and differ from a float32 run "
         "by far more than rounding.",
         "Leave TF32 off where results must carry across machines: "
         "torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = "
         "False, torch.set_float32_matmul_precision(\"highest\"); or record goldens per GPU "
         "generation."),
    Code("RC119", "flash-attn without deterministic=True",
         "flash-attn's backward pass adds the key/value gradients of each block with atomic "
         "adds unless deterministic=True (its default is False); "
         "torch.use_deterministic_algorithms(True) does not reach it, so gradients differ "
         "between runs on the same GPU.",
         "Pass deterministic=True to flash_attn_func / flash_attn_varlen_func (and the packed "
         "forms) in every run that must reproduce; it costs some backward speed."),
    Code("RC120", "NCCL reductions in the network switch",
         "With NCCL_ALGO naming NVLS, NVLSTree or CollNet (or NCCL_NVLS_ENABLE=1), all-reduce "
         "sums in the NVLink or InfiniBand switch, in an order of its own that changes between "
         "runs; ring and tree reductions add in a fixed order.",
         "Set NCCL_ALGO to Ring or Tree, or exclude the switch algorithms (NCCL_ALGO=^NVLS,"
         "CollNetDirect,CollNetChain), in every run that must reproduce."),
    Code("RC121", "Transformer Engine with nondeterministic algorithms allowed",
         "Transformer Engine picks fused attention and GEMM kernels that may be "
         "nondeterministic unless NVTE_ALLOW_NONDETERMINISTIC_ALGO=0; its default (1) allows "
         "them, and torch.use_deterministic_algorithms(True) does not reach them.",
         "Set NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 in the launch environment or in os.environ "
         "before transformer_engine is imported (and silence this finding on the import when "
         "the launch script sets it)."),
    Code("RC122", "memory that nothing wrote is read by a reduction",
         "torch.empty() (and empty_like, new_empty) returns memory as the allocator left it; "
         "when only some elements are written before the tensor is summed, averaged or "
         "reduced, the rest is whatever that memory held, which changes from run to run (and "
         "may be NaN).",
         "Create it with torch.zeros()/torch.full(), call .zero_() first, or reduce only the "
         "written part (buf[:n].sum())."),
    Code("RC123", "common ops with nondeterministic CUDA kernels, deterministic algorithms off",
         "The backward passes of nn.Embedding, gather, index_select (and cumsum on CUDA) add "
         "with atomic adds, whose order changes between runs; they switch to deterministic "
         "kernels only under torch.use_deterministic_algorithms(True), which nothing in the "
         "program calls (repro-check's runs do; a plain `python train.py` does not).",
         "Call torch.use_deterministic_algorithms(True) at start-up (and set "
         "CUBLAS_WORKSPACE_CONFIG=:4096:8) in every run that must reproduce."),
)}


def parse_codes(values: Iterable[Any], where: str) -> frozenset[str]:
    """Validate codes given by a user; an unknown one is a usage error naming where it came from."""
    out: set[str] = set()
    for v in values:
        if not isinstance(v, str):
            raise UsageError(f"{where}: expected codes like \"RC101\", got {v!r}")
        code = v.strip().upper()
        if code not in CODES:
            hint = f" (did you mean 'RC{code}'?)" if f"RC{code}" in CODES else ""
            raise UsageError(f"{where}: unknown code {v!r}{hint}; codes: "
                             f"{', '.join(CODES)}")
        out.add(code)
    return frozenset(out)
