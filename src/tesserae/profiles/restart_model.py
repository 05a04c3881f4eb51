"""Built-in restart costs: checkpoint bytes from parameter counts, a fixed start-up (DESIGN §5).

A MODEL, not a measurement, and every report says so; ``tesserae profile`` measures the real
figures (:mod:`tesserae.profiler.restart`). For every job type the project knows:

- checkpoint bytes = parameters x (4 bytes of fp32 weight + the optimizer's state per parameter:
  0 for plain SGD, 4 for SGD with momentum, 8 for Adam/AdamW, 12 for Adam with AMSGrad);
  buffers (BatchNorm statistics) and the few scalars of an optimizer are left out (< 0.1 %);
- start-up seconds = :data:`STARTUP_SECONDS` for every model: launching the processes, importing
  the framework, creating the CUDA context and the NCCL communicator, building the model. A
  round figure: on a CPU the interpreter, PyTorch's import, the model and optimizer build
  measured 3-7 s (docs/profiler.md); CUDA and NCCL initialisation, which could not be measured
  here, add seconds more on a GPU node.

Parameter counts and their sources (each entry below also names its source; the table with
every figure is in docs/restart-costs.md). The optimizer is the one the source trains with.

- The profiler's catalogue (``resnet18``, ``resnet50``, ``vgg19``, ``gpt-small``, ``bert-base``,
  ``dcgan``, ``recommendation``): counted from ``tesserae.profiler.models`` at size ``full``.
- Tiresias' models (``alexnet``, ``googlenet``, ``inception3``, ``resnet50/101/152``,
  ``vgg11/16/19``): torchvision's model documentation ("Params", ImageNet heads); ``inception4``:
  timm's ``inception_v4`` model card (42.7 M). SGD with momentum assumed (the ImageNet recipe).
- Gavel's job types: counted by instantiating the models of stanford-futuredata/gavel (commit
  c4fa400) with the arguments of its ``scheduler/job_table.py``: ResNet-18 on CIFAR-10 and
  ResNet-50 (SGD, momentum 0.9), the Transformer of ``translation`` (Adam; 5,000-word Multi30k
  vocabularies assumed, the embeddings are 10 % of its parameters), the 2-layer LSTM of
  ``language_modeling`` on Wikitext-2 (plain SGD), the recoder autoencoder of ``recommendation``
  on ML-20M's 20,108 items (Adam), A3C's LSTM network (Adam with AMSGrad), CycleGAN's two
  generators and two discriminators (Adam).
- Blox's large jobs: BERT-LARGE 340 M (Devlin et al., NAACL 2019) and GPT-2 345 M (Radford et al.,
  2019), Adam; PointNet 3.5 M (Qi et al., CVPR 2017), Adam; its resnet50, vgg19 and DCGAN as above.

A table names model families (:func:`model_family`: 'ResNet-50 (batch size 16)' is 'resnet50');
a job type is looked up by its exact name first, then by its family. Each table reader attaches
the table of the system it comes from: Gavel's models differ from the catalogue's where the names
agree (Gavel's ResNet-18 is the CIFAR-10 network, its Recommendation an autoencoder).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tesserae.core.errors import InputError
from tesserae.core.restart import DEFAULT_STORAGE_GBPS, RestartCost
from tesserae.profiles.families import model_family

#: Start-up seconds of every model in the built-in table (see module docstring).
STARTUP_SECONDS = 10.0
#: fp32 weights.
WEIGHT_BYTES = 4
#: Optimizer state per parameter, bytes (fp32).
OPTIMIZER_STATE_BYTES: dict[str, int] = {"sgd": 0, "momentum": 4, "adam": 8, "amsgrad": 12}


@dataclass(frozen=True)
class ModelSize:
    """Parameters and optimizer of one model, and where the count comes from."""

    parameters: int
    optimizer: str
    source: str

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZER_STATE_BYTES:
            raise ValueError(f"unknown optimizer {self.optimizer!r}")

    @property
    def checkpoint_bytes(self) -> int:
        return self.parameters * (WEIGHT_BYTES + OPTIMIZER_STATE_BYTES[self.optimizer])


_CATALOGUE = "counted from tesserae.profiler.models (size full)"
_TORCHVISION = "torchvision model documentation"
_GAVEL = "Gavel's workload code (c4fa400)"

#: The profiler's catalogue and the models of Tiresias' traces (also the built-in model's job types).
COMMON: dict[str, ModelSize] = {
    "resnet18": ModelSize(11_689_512, "momentum", _CATALOGUE),
    "resnet50": ModelSize(25_557_032, "momentum", _CATALOGUE),
    "vgg19": ModelSize(143_667_240, "momentum", _CATALOGUE),
    "gptsmall": ModelSize(124_046_592, "adam", _CATALOGUE),
    "bertbase": ModelSize(109_219_386, "adam", _CATALOGUE),
    "dcgan": ModelSize(6_342_272, "adam", _CATALOGUE),
    "recommendation": ModelSize(10_707_009, "adam", _CATALOGUE),
    "alexnet": ModelSize(61_100_840, "momentum", _TORCHVISION),
    "googlenet": ModelSize(6_624_904, "momentum", _TORCHVISION),
    "inception3": ModelSize(27_161_264, "momentum", _TORCHVISION),
    "inception4": ModelSize(42_700_000, "momentum", "timm inception_v4 model card"),
    "resnet101": ModelSize(44_549_160, "momentum", _TORCHVISION),
    "resnet152": ModelSize(60_192_808, "momentum", _TORCHVISION),
    "vgg11": ModelSize(132_863_336, "momentum", _TORCHVISION),
    "vgg16": ModelSize(138_357_544, "momentum", _TORCHVISION),
}

#: Gavel's job types (``simulation_throughputs.json``, Gavel traces).
GAVEL: dict[str, ModelSize] = {
    "resnet18": ModelSize(11_173_962, "momentum", f"{_GAVEL}: CIFAR-10 ResNet-18"),
    "resnet50": ModelSize(25_557_032, "momentum", f"{_GAVEL}: torchvision ResNet-50"),
    "transformer": ModelSize(49_312_768, "adam", f"{_GAVEL}: Transformer, 5k-word vocabularies assumed"),
    "lm": ModelSize(13_987_678, "sgd", f"{_GAVEL}: 2-layer LSTM on Wikitext-2"),
    "recommendation": ModelSize(8_063_508, "adam", f"{_GAVEL}: autoencoder on ML-20M"),
    "a3c": ModelSize(3_249_639, "amsgrad", f"{_GAVEL}: A3C LSTM on Pong"),
    "cyclegan": ModelSize(28_285_832, "adam", f"{_GAVEL}: CycleGAN, 2 generators + 2 discriminators"),
}

#: Blox's ``norm_speed.csv`` job types (large pipeline-parallel jobs and the small ones beside them).
BLOX: dict[str, ModelSize] = {
    "bertlarge": ModelSize(340_000_000, "adam", "Devlin et al. 2019 (BERT-LARGE)"),
    "gpt2medium": ModelSize(345_000_000, "adam", "Radford et al. 2019 (GPT-2 345M)"),
    "pointnet": ModelSize(3_500_000, "adam", "Qi et al. 2017 (PointNet classification)"),
    "resnet50": COMMON["resnet50"],
    "vgg19": COMMON["vgg19"],
    "dcgan": COMMON["dcgan"],
}

Tables = Sequence[Mapping[str, ModelSize]]


def builtin_size(job_type: str, tables: Tables = (COMMON,)) -> ModelSize | None:
    """The first table's entry for ``job_type``: by its exact name, else by its model family."""
    family = model_family(job_type)
    for table in tables:
        size = table.get(job_type) or table.get(family)
        if size is not None:
            return size
    return None


def builtin_restart_cost(job_type: str, tables: Tables = (COMMON,),
                         startup_seconds: float = STARTUP_SECONDS) -> RestartCost | None:
    """The built-in (model) restart data of ``job_type``, or None when no table knows it."""
    size = builtin_size(job_type, tables)
    if size is None:
        return None
    return RestartCost(float(size.checkpoint_bytes), startup_seconds, measured=False,
                       source=f"model: {size.optimizer} optimizer state ({size.source})", parameters=size.parameters)


class RestartSeconds:
    """Mixin for throughput models: ``restart_seconds`` from the model's ``restart_cost``."""

    name: str

    def restart_cost(self, job_type: str) -> RestartCost | None:
        raise NotImplementedError

    def restart_seconds(self, job_type: str, num_gpus: int, storage_gbps: float = DEFAULT_STORAGE_GBPS) -> float:
        """Seconds a (re)start of ``job_type`` costs (the same on any GPU count; see core.restart)."""
        cost = self.restart_cost(job_type)
        if cost is None:
            raise InputError(f"job type {job_type!r} has no restart cost in profile {self.name}: neither "
                             "measured (a 'restart' row of a Tesserae profile) nor a model the built-in "
                             "table knows; add a 'restart' row to the profile or use --restart-cost fixed")
        return cost.seconds(storage_gbps)
