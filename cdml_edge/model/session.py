"""How onnxruntime runs a model: execution providers, threads, spinning, graph optimisation.

:class:`InferenceSettings` holds what ``models.<modality>`` in ``factory.yaml`` says about it
(the live agent, replay and ``doctor`` read the same fields). The defaults suit small boards,
where the model is one part of a pipeline sharing a few slow cores:

* one intra-op and one inter-op thread: a session runs on the thread that calls it, and the
  agent's pipeline threads give the parallelism;
* no spinning: onnxruntime's pool threads otherwise busy-wait after every run, which costs
  tens of milliseconds of CPU per run at a few runs per second;
* providers ``None`` (auto): CUDA (then CPU for the operators it lacks) when this onnxruntime
  build has it, as on a Jetson with NVIDIA's wheel; the CPU otherwise. TensorRT is used only
  when named, because it builds an engine per model at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover
    from cdml_edge.config import ModelConfig

GraphOptimization = Literal["disable", "basic", "extended", "all"]

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


@dataclass(frozen=True)
class InferenceSettings:
    """Session settings of one model (defaults: small boards, see the module docstring).

    ``intra_op_threads`` / ``inter_op_threads``: 0 lets onnxruntime choose (one per core).
    ``providers``: ``None`` picks CUDA when available, else the CPU (:func:`resolve_providers`).
    """

    providers: tuple[str, ...] | None = None
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    spinning: bool = False
    graph_optimization: GraphOptimization = "all"

    @classmethod
    def from_config(cls, mc: ModelConfig) -> InferenceSettings:
        """The settings a ``models.<modality>`` section asks for."""
        return cls(
            providers=tuple(mc.providers) if mc.providers is not None else None,
            intra_op_threads=mc.intra_op_threads,
            inter_op_threads=mc.inter_op_threads,
            spinning=mc.spinning,
            graph_optimization=mc.graph_optimization,
        )

    def session_options(self) -> Any:
        """An ``onnxruntime.SessionOptions`` carrying these settings."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.intra_op_num_threads = self.intra_op_threads
        opts.inter_op_num_threads = self.inter_op_threads
        spin = "1" if self.spinning else "0"
        opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
        opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
        opts.graph_optimization_level = _LEVELS[self.graph_optimization](ort)
        return opts

    def describe(self, active: Sequence[str] | None = None) -> str:
        """One line for the start-up log.

        Providers (the ``active`` ones when given), then :meth:`summary`.
        """
        prov = ", ".join(active if active is not None else resolve_providers(self.providers))
        return f"{prov}; {self.summary()}"

    def summary(self) -> str:
        """Threads, spinning and graph optimisation (what ``doctor`` adds to a model line)."""
        return (
            f"threads intra-op {_threads(self.intra_op_threads)}, inter-op "
            f"{_threads(self.inter_op_threads)}; spinning {'on' if self.spinning else 'off'}; "
            f"graph optimization {self.graph_optimization}"
        )


def resolve_providers(requested: Sequence[str] | None) -> list[str]:
    """The providers to ask onnxruntime for.

    ``requested`` as given, or (``None``) CUDA then the CPU when this onnxruntime build has
    CUDA, the CPU alone otherwise.
    """
    if requested is not None:
        return list(requested)
    import onnxruntime as ort

    return [CUDA, CPU] if CUDA in ort.get_available_providers() else [CPU]


def _threads(n: int) -> str:
    return str(n) if n > 0 else "auto"


_LEVELS: dict[str, Any] = {
    "disable": lambda ort: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": lambda ort: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": lambda ort: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": lambda ort: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
