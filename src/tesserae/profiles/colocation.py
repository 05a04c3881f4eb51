"""Co-location data for jobs that can be launched with several parallelism strategies (DESIGN §4.2).

A large job (an LLM trained with pipeline, tensor or data parallelism) runs at a different speed
with each layer split, and shares GPUs better with some splits than with others. The packing
policy weighs an edge by the best strategy and the Plan records which one was chosen, so this
table answers both "how fast" and "with which strategy". It is independent of any file format:
``norm_speed.py`` fills it from Blox's CSV, ``tesserae_profile.py`` from the project's JSON.

Speeds are normalised: ``solo`` speeds are relative to a common baseline (in Blox's data the
data-parallel run = 1.0); in a pair, ``speed1`` is the large job's speed on the same baseline
and ``speed2`` the small job's speed relative to the small job running alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Gains closer than this are equal (0.22 + 0.91 and 0.24 + 0.89 differ in floating point).
GAIN_TIE_TOLERANCE = 1e-9

# (large job type, GPU count) -> [(strategy, normalised solo speed), ...] in input order.
SoloKey = tuple[str, int]
# (large job type, GPU count, strategy, small job type, small job GPU count)
PairKey = tuple[str, int, str, str, int]
# (speed1, speed2), or None when the two do not fit together (out of memory).
PairSpeeds = tuple[float, float] | None


@dataclass(eq=True)
class ColocationTable:
    """Solo speeds per strategy and pair speeds per (strategy, partner); best choices precomputed.

    ``pairs`` maps a measured combination to ``(speed1, speed2)`` or to None for out-of-memory;
    a combination absent from ``pairs`` was not measured. Both cases give no pair in
    :meth:`best_strategy`.
    """

    solo: dict[SoloKey, list[tuple[str, float]]] = field(default_factory=dict)
    pairs: dict[PairKey, PairSpeeds] = field(default_factory=dict)
    _best_solo: dict[SoloKey, tuple[str, float]] = field(init=False, repr=False, compare=False)
    _best_pair: dict[tuple[str, int, str, int], tuple[str, float, float]] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A zero speed on either side means the pair does not fit: store it as out-of-memory.
        self.pairs = {k: None if v is None or v[0] <= 0.0 or v[1] <= 0.0 else (float(v[0]), float(v[1]))
                      for k, v in self.pairs.items()}
        # Precomputed once: the packing policy asks for every candidate edge in every round.
        self._best_solo = {}
        for key, strategies in self.solo.items():
            best: tuple[str, float] | None = None
            for strategy, speed in strategies:
                if speed > 0.0 and (best is None or speed > best[1]):
                    best = (strategy, speed)
            if best is not None:
                self._best_solo[key] = best
        self._best_pair = {}
        gains: dict[tuple[str, int, str, int], float] = {}
        for (large, gpus, strategy, small, small_gpus), speeds in self.pairs.items():
            if speeds is None:
                continue
            base = self.solo_base(large, gpus)
            gain = speeds[0] / base + speeds[1] - 1.0
            key = (large, gpus, small, small_gpus)
            if key in gains:
                diff = gain - gains[key]
                if diff < -GAIN_TIE_TOLERANCE:
                    continue
                if diff <= GAIN_TIE_TOLERANCE and speeds[0] <= self._best_pair[key][1]:
                    continue  # a tie: keep the one where the large job runs faster (then the first)
            gains[key] = gain
            self._best_pair[key] = (strategy, speeds[0], speeds[1])

    def large_types(self) -> list[SoloKey]:
        """Every (large job type, GPU count) with strategies, sorted."""
        keys = set(self.solo) | {(k[0], k[1]) for k in self.pairs}
        return sorted(keys)

    def strategies(self, large: str, gpus: int) -> list[tuple[str, float]]:
        """The strategies measured alone for ``large`` on ``gpus`` GPUs, with their solo speeds."""
        return list(self.solo.get((large, gpus), []))

    def partners(self, large: str, gpus: int) -> list[tuple[str, int]]:
        """The (small job type, GPU count) measured next to ``large`` on ``gpus`` GPUs, sorted."""
        return sorted({(k[3], k[4]) for k in self.pairs if k[0] == large and k[1] == gpus})

    def pair(self, large: str, gpus: int, strategy: str, small: str,
             small_gpus: int | None = None) -> PairSpeeds:
        """(speed1, speed2) for one strategy; None when out of memory or not measured."""
        return self.pairs.get((large, gpus, strategy, small, gpus if small_gpus is None else small_gpus))

    def solo_base(self, large: str, gpus: int) -> float:
        """The best solo speed: what the large job runs at alone (1.0 when no solo row exists)."""
        best = self._best_solo.get((large, gpus))
        return best[1] if best is not None else 1.0

    def best_solo_strategy(self, large: str, gpus: int) -> tuple[str, float] | None:
        """(strategy, solo speed) of the fastest strategy alone; None when none can run."""
        return self._best_solo.get((large, gpus))

    def best_strategy(self, large: str, gpus: int, small: str,
                      small_gpus: int | None = None) -> tuple[str, float, float] | None:
        """(strategy, speed1, speed2) maximising the sharing gain; None when every strategy OOMs.

        The gain is ``speed1 / best solo speed + speed2 - 1`` (DESIGN §4.2's gain, with the large
        job's alone throughput taken at its best solo strategy); with Blox's data the best solo
        speed is 1.0, so this is ``speed1 + speed2 - 1``. Among equal gains (within
        :data:`GAIN_TIE_TOLERANCE`) the one with the higher ``speed1`` wins, then the one listed first.
        """
        return self._best_pair.get((large, gpus, small, gpus if small_gpus is None else small_gpus))

    def speed_factor(self, job: tuple[str, int], partner: tuple[str, int] | None, strategy: str | None,
                     partner_strategy: str | None) -> float:
        """How much faster (or slower) ``job`` runs with the given strategies than with the best ones.

        The default rates of a profile assume the best strategy for the context (the fastest alone,
        the best sharing gain in a pair); this is the factor to apply when another strategy was
        chosen: 1.0 when the job and its partner have no strategies or none is given, 0.0 when the
        given strategy is not measured or does not fit (out of memory).
        """
        jt, n = job
        if partner is None:
            if strategy is None or (jt, n) not in self.solo:
                return 1.0
            speed = dict(self.solo[(jt, n)]).get(strategy, 0.0)
            return speed / self.solo_base(jt, n) if speed > 0 else 0.0
        if strategy is not None and (jt, n) in self.solo:  # the large job, with its own strategy
            best = self.best_strategy(jt, n, partner[0], partner[1])
            got = self.pair(jt, n, strategy, partner[0], partner[1])
            return 0.0 if best is None or got is None else got[0] / best[1]
        if partner_strategy is not None and (partner[0], partner[1]) in self.solo:  # next to a large job
            best = self.best_strategy(partner[0], partner[1], jt, n)
            got = self.pair(partner[0], partner[1], partner_strategy, jt, n)
            return 0.0 if best is None or got is None else got[1] / best[2]
        return 1.0
