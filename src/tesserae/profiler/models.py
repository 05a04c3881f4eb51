"""The catalogue's networks in plain ``torch.nn`` and their training steps on synthetic data.

:func:`build` returns a :class:`TrainStep`: calling ``step()`` runs one training iteration
(forward, loss, backward, optimizer step) on a batch made once, on the device, with random
values. Reusing the batch keeps data loading out of the measurement: the profile measures the
GPU work of training, as Gavel's and Tiresias' tables do.

``wrap`` is applied to every trained module before its optimizer is made (the worker passes a
DistributedDataParallel wrapper for multi-GPU runs; the identity otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tesserae.profiler.catalogue import size_settings

Wrap = Callable[[nn.Module], nn.Module]


@dataclass
class TrainStep:
    """One model ready to train: ``step()`` runs an iteration; sizes are for the profile's skew.

    ``modules`` and ``optimizers`` hold the training state a checkpoint saves.
    """

    name: str
    step: Callable[[], None]
    parameters: int
    largest_tensor: int
    batch: int
    modules: list[nn.Module]
    optimizers: list[torch.optim.Optimizer]

    @property
    def skew(self) -> float:
        """Largest parameter tensor / all parameters: Tiresias' model skew."""
        return self.largest_tensor / self.parameters if self.parameters else 0.0


# ------------------------------------------------------------------------------------------ ResNet
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    """ResNet as in He et al. (ImageNet stem: 7x7 convolution and max-pooling)."""

    def __init__(self, block: type[BasicBlock | Bottleneck], blocks: tuple[int, ...], width: int,
                 classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        cin = width
        for stage, count in enumerate(blocks):
            w = width * 2**stage
            for i in range(count):
                layers.append(block(cin, w, 2 if stage > 0 and i == 0 else 1))
                cin = w * block.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --------------------------------------------------------------------------------------------- VGG
VGG19_CFG: tuple[int | str, ...] = (1, 1, "M", 2, 2, "M", 4, 4, 4, 4, "M", 8, 8, 8, 8, "M", 8, 8, 8, 8, "M")


class VGG(nn.Module):
    """VGG-19 (configuration E of Simonyan and Zisserman); channel counts are multiples of ``width``."""

    def __init__(self, width: int, pool: int, hidden: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in VGG19_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                cout = width * int(v)
                layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]
                cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.classifier = nn.Sequential(
            nn.Linear(cin * pool * pool, hidden), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


# ------------------------------------------------------------------------------------ transformers
class GPT(nn.Module):
    """A GPT-2-style decoder: learned positions, pre-norm blocks, causal mask, tied output embedding."""

    def __init__(self, layers: int, dim: int, heads: int, seq: int, vocab: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq, dim)
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(pos)
        x = self.blocks(x, mask=self.mask, is_causal=True)
        return self.head(self.norm(x))


class BERT(nn.Module):
    """A BERT-style encoder: token, position and segment embeddings, post-norm blocks, MLM head."""

    def __init__(self, layers: int, dim: int, heads: int, seq: int, vocab: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq, dim)
        self.segments = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim)
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.transform = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.tokens.weight

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(pos) + self.segments(segments))
        return self.decoder(self.transform(self.blocks(x)))


# ------------------------------------------------------------------------------------------- DCGAN
class Generator(nn.Module):
    def __init__(self, nz: int, ngf: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, ndf: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten()


# ---------------------------------------------------------------------------------- recommendation
class NCF(nn.Module):
    """Neural collaborative filtering (He et al. 2017, the MLP tower): embeddings -> MLP -> logit."""

    def __init__(self, users: int, items: int, dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.users = nn.Embedding(users, dim)
        self.items = nn.Embedding(items, dim)
        layers: list[nn.Module] = []
        cin = 2 * dim
        for h in hidden:
            layers += [nn.Linear(cin, h), nn.ReLU(inplace=True)]
            cin = h
        layers.append(nn.Linear(cin, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([self.users(users), self.items(items)], dim=1)).flatten()


# ------------------------------------------------------------------------------------------ build
def _identity(module: nn.Module) -> nn.Module:
    return module


def _finish(name: str, modules: list[nn.Module], optimizers: list[torch.optim.Optimizer], step: Callable[[], None],
            batch: int) -> TrainStep:
    params = {id(p): p for m in modules for p in m.parameters()}
    sizes = [p.numel() for p in params.values()]
    return TrainStep(name, step, sum(sizes), max(sizes, default=0), batch, modules, optimizers)


def _classifier(name: str, model: nn.Module, s: dict[str, Any], device: torch.device, wrap: Wrap) -> TrainStep:
    model = model.to(device)
    net = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(s["batch"], 3, s["image"], s["image"], device=device)
    y = torch.randint(0, s["classes"], (s["batch"],), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return _finish(name, [model], [opt], step, s["batch"])


def _language(name: str, model: nn.Module, s: dict[str, Any], device: torch.device, wrap: Wrap,
              causal: bool) -> TrainStep:
    model = model.to(device)
    net = wrap(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, n, v = s["batch"], s["seq"], s["vocab"]
    ids = torch.randint(0, v, (b, n), device=device)
    labels = torch.randint(0, v, (b, n), device=device)
    segments = (torch.arange(n, device=device) >= n // 2).long().expand(b, n)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = net(ids) if causal else net(ids, segments)
        F.cross_entropy(logits.reshape(-1, v), labels.reshape(-1)).backward()
        opt.step()

    return _finish(name, [model], [opt], step, b)


def _dcgan(name: str, s: dict[str, Any], device: torch.device, wrap: Wrap) -> TrainStep:
    gen, disc = Generator(s["nz"], s["ngf"]).to(device), Discriminator(s["ndf"]).to(device)
    g_net, d_net = wrap(gen), wrap(disc)
    g_opt = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    b = s["batch"]
    real = torch.randn(b, 3, 64, 64, device=device).clamp_(-1, 1)
    z = torch.randn(b, s["nz"], 1, 1, device=device)
    d_target = torch.cat([torch.ones(b, device=device), torch.zeros(b, device=device)])
    g_target = torch.ones(b, device=device)

    def step() -> None:
        fake = g_net(z)
        # Discriminator: real and fake in one forward (one forward per backward suits DDP).
        d_opt.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(d_net(torch.cat([real, fake.detach()])), d_target).backward()
        d_opt.step()
        # Generator: fool the updated discriminator.
        g_opt.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(d_net(fake), g_target).backward()
        g_opt.step()

    return _finish(name, [gen, disc], [g_opt, d_opt], step, b)


def _recommendation(name: str, s: dict[str, Any], device: torch.device, wrap: Wrap) -> TrainStep:
    model = NCF(s["users"], s["items"], s["dim"], tuple(s["hidden"])).to(device)
    net = wrap(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    b = s["batch"]
    users = torch.randint(0, s["users"], (b,), device=device)
    items = torch.randint(0, s["items"], (b,), device=device)
    clicked = torch.randint(0, 2, (b,), device=device).float()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(net(users, items), clicked).backward()
        opt.step()

    return _finish(name, [model], [opt], step, b)


def build(name: str, size: str, device: torch.device | str = "cpu", wrap: Wrap = _identity,
          seed: int = 0) -> TrainStep:
    """The training step of catalogue model ``name`` at ``size`` on ``device``."""
    s = size_settings(name, size)
    device = torch.device(device)
    torch.manual_seed(seed)
    if name == "resnet18":
        return _classifier(name, ResNet(BasicBlock, s["blocks"], s["width"], s["classes"]), s, device, wrap)
    if name == "resnet50":
        return _classifier(name, ResNet(Bottleneck, s["blocks"], s["width"], s["classes"]), s, device, wrap)
    if name == "vgg19":
        return _classifier(name, VGG(s["width"], s["pool"], s["hidden"], s["classes"]), s, device, wrap)
    if name == "gpt-small":
        gpt = GPT(s["layers"], s["dim"], s["heads"], s["seq"], s["vocab"])
        return _language(name, gpt, s, device, wrap, causal=True)
    if name == "bert-base":
        bert = BERT(s["layers"], s["dim"], s["heads"], s["seq"], s["vocab"])
        return _language(name, bert, s, device, wrap, causal=False)
    if name == "dcgan":
        return _dcgan(name, s, device, wrap)
    if name == "recommendation":
        return _recommendation(name, s, device, wrap)
    raise KeyError(name)  # size_settings already rejected names outside the catalogue

