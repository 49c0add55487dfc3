"""incidentkit: load ADK agent incident evidence into pandas frames and triage it."""

from incidentkit.errors import (
    IncidentkitError,
    ManifestError,
    NotebookError,
    ParameterError,
    SchemaError,
    SimulationError,
    SourceError,
)
from incidentkit.evidence import Evidence, open_evidence
from incidentkit.frames import FRAMES, empty
from incidentkit.manifest import Filters, Window, load_manifest

__all__ = [
    "FRAMES",
    "Evidence",
    "Filters",
    "IncidentkitError",
    "ManifestError",
    "NotebookError",
    "ParameterError",
    "SchemaError",
    "SimulationError",
    "SourceError",
    "Window",
    "empty",
    "load_manifest",
    "open_evidence",
]
__version__ = "0.1.0"
