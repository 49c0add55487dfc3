from __future__ import annotations

import incidentkit

# The verbs and nouns a notebook uses. Changing this set is an API change: update it on purpose.
PUBLIC = {
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
}


def test_public_api_is_pinned() -> None:
    assert set(incidentkit.__all__) == PUBLIC
    assert len(incidentkit.__all__) == len(PUBLIC)
    for name in PUBLIC:
        assert hasattr(incidentkit, name), name


def test_every_error_derives_from_the_one_base() -> None:
    for name in incidentkit.__all__:
        obj = getattr(incidentkit, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, incidentkit.IncidentkitError)
