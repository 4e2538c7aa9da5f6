"""What an emulation found: :class:`EmulationResult`, its races, mismatches, outputs and
statistics per policy.  Its own module because everything that reports on an emulation (the
API, the CLI, the fuzzer's oracle, :class:`~syncopate.errors.EmulationError`) reads it, while
only the API runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EmulationError
from .checker import Race

__all__ = ["EmulationResult"]


@dataclass
class EmulationResult:
    """What an emulation found.  ``ok`` is False when the checker reported a race, or an
    output differed from the reference; ``notes`` (elements within the rounding bound of their
    float atomic adds, "float atomic order") are not problems."""

    world_size: int
    backend: str
    policies: list[str]
    launches: int
    races: list[Race] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    #: "float atomic order": within ``reference.float_atomic_bound`` of the unfused kernel
    notes: list[str] = field(default_factory=list)
    #: policy -> rank -> parameter -> the buffer after that rank's last launch
    outputs: dict = field(default_factory=dict)
    #: policy -> {"seconds", "steps", "coroutines", "transfers", ...}
    stats: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No race and no mismatch; notes do not count."""
        return not self.races and not self.mismatches

    def races_of(self, kind: str) -> list[Race]:
        return [r for r in self.races if r.kind == kind]

    def summary(self, limit: int = 20) -> str:
        lines = [f"emulated {self.world_size} ranks ({self.backend}), {self.launches} launches "
                 f"x {len(self.policies)} policies in {self.seconds:.2f} s: "
                 + ("clean" if self.ok else f"{len(self.races)} race(s), "
                    f"{len(self.mismatches)} mismatch(es)")
                 + (f" ({len(self.notes)} note(s))" if self.notes else "")]
        for r in self.races[:limit]:
            lines.append(f"  {r}")
        for m in self.mismatches[:limit]:
            lines.append(f"  mismatch: {m}")
        for n in self.notes[:limit]:
            lines.append(f"  note: {n}")
        more = len(self.races) + len(self.mismatches) - 2 * limit
        if more > 0:
            lines.append(f"  ... and more ({len(self.races)} races, {len(self.mismatches)} "
                         f"mismatches in all)")
        return "\n".join(lines)

    def raise_for_problems(self) -> "EmulationResult":
        if not self.ok:
            raise EmulationError(self.summary(), result=self)
        return self

