"""``pip install llama-index-readers-hwpx`` brings no AGPL package: the reader's declared
dependency closure, resolved from the installed distributions' metadata (``Requires-Dist``
without extras, markers evaluated for this interpreter), has no distribution whose
``License`` / ``License-Expression`` / classifiers name the AGPL, and never pyhwp (AGPL-3.0,
the best-known HWP 5 parser, which this reader must not use)."""

from __future__ import annotations

import re
from email.message import Message
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

READER = "llama-index-readers-hwpx"
FORBIDDEN = {"pyhwp"}
_AGPL = re.compile(r"\bAGPL|Affero", re.IGNORECASE)


def agpl_fields(meta: Message) -> list[str]:
    """The license fields of one distribution's metadata that name the AGPL."""
    fields = [
        ("License", meta.get("License") or ""),
        ("License-Expression", meta.get("License-Expression") or ""),
        *(("Classifier", c) for c in meta.get_all("Classifier") or [] if c.startswith("License")),
    ]
    return [f"{k}: {v}" for k, v in fields if _AGPL.search(v)]


def closure(root: str) -> dict[str, metadata.Distribution]:
    """Every distribution ``pip install root`` installs (no extras), by canonical name."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = metadata.distribution(name)  # PackageNotFoundError: the closure is incomplete
        seen[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # an extra, or not for this platform / Python
            todo.append(req.name)
    return seen


def test_the_license_check_catches_the_agpl() -> None:
    """The oracle for the check itself: pyhwp's own metadata style, and the SPDX forms."""
    pyhwp = Message()
    pyhwp["Name"] = "pyhwp"
    pyhwp["License"] = "GNU Affero GPL v3"
    pyhwp["Classifier"] = "License :: OSI Approved :: GNU Affero General Public License v3"
    assert len(agpl_fields(pyhwp)) == 2
    spdx = Message()
    spdx["License-Expression"] = "AGPL-3.0-or-later"
    assert agpl_fields(spdx) == ["License-Expression: AGPL-3.0-or-later"]
    mit = Message()
    mit["License"] = "MIT"
    mit["Classifier"] = "License :: OSI Approved :: GNU General Public License v3 (GPLv3)"
    assert agpl_fields(mit) == []


def test_reader_dependency_closure_has_no_agpl_package() -> None:
    dists = closure(READER)
    assert {"llama-index-core", "lxml", "olefile"} <= set(dists)  # the declared ones
    assert not FORBIDDEN & set(dists), "pyhwp (AGPL) is in the reader's dependencies"
    bad = {name: agpl_fields(d.metadata) for name, d in dists.items()}  # type: ignore[arg-type]
    assert {k: v for k, v in bad.items() if v} == {}
    print(f"{len(dists)} distributions in the closure of {READER}, none AGPL")


def test_no_reader_module_imports_pyhwp() -> None:
    """Nor is pyhwp imported lazily or optionally anywhere in the package's code."""
    from pathlib import Path

    import llama_index.readers.hwpx as pkg

    root = Path(pkg.__file__).parent
    sources = {p.name: p.read_text(encoding="utf-8") for p in root.glob("*.py")}
    assert "hwp.py" in sources and "_hwp5_container.py" in sources
    assert [n for n, s in sources.items() if re.search(r"\b(import|from)\s+hwp5\b|pyhwp", s)] == []
